"""Benchmark harness for issue 5: our broker beside RabbitMQ, ActiveMQ and NATS JetStream, in one run.

One module per system adapter (``ours``, ``rabbitmq``, ``activemq``, ``nats_jetstream``), the shared
process and measurement helpers (``common``), the ``runner`` that measures every system in turn and the
``report`` that writes results.json, report.md and the PNG plots. ``python -m bench.run`` is the entry point.
"""
