"""The parts of the pipeline capacity benchmark (``python -m bench.pipeline_capacity``): the topology copy on free
ports, the CPU accounting per process kind from /proc, the keep-up decision, the probes of the running deployment
and the report."""
