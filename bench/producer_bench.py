"""Producer throughput: our Producer against kafka-python's KafkaProducer on the same broker, in one run.

Starts a broker (tests.support.BrokerProcess), then for each case sends MESSAGES messages of SIZE bytes to a
fresh one-partition topic and stops the clock when the broker holds them all (ListOffsets latest reaches the
count). Cases:

* ours sync, batch B, acks A: ``send(ProducerData(topic, None, [B messages]))`` in a loop -- one Produce
  request of B records per call (the paper's sync producer; "batch size" = messages per send);
* ours async, batch B, acks A: one ``send(ProducerData(topic, None, [message]))`` per message, producer.type
  async with batch.size=B and queue.time 5 ms; the sender thread forms the batches;
* ours async-batch, batch B, acks A: the async producer as above, fed by ``send_batch(topic, [B messages])``
  (one call and one queue lock take per B messages, as the mirror and the emulators hand records over);
* kafka-python: KafkaProducer(acks=A, batch_size=B * (SIZE + 70) bytes, linger_ms 0 for B=1 else 5) -- so a
  batch holds B messages as ours do (with its default 16 KiB batch_size and linger_ms=0 it would still put
  whatever accumulates during a request into one batch: about 30k msg/s here, i.e. not one message per
  request); one send() per message, then flush(). Idempotence off (acks=0 does not allow it).

Prints msg/s, MB/s (message payload), the CPU this process spent per message (all its threads: the caller,
the sender, the connection; the broker is another process) and ours/kafka-python for the same batch and acks.

    .venv/bin/python -m bench.producer_bench [--messages 1000000] [--size 200] [--batches 1,50] [--acks 0,1]
                                             [--no-async] [--no-kafka-python] [--profile CASE] [--cases A,B]
                                             [--rounds N]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from pipeline.client.connection import BrokerConnection
from pipeline.client.producer import Producer, ProducerData
from pipeline.protocol.api_keys import ApiKey
from tests.support import BrokerProcess
from tests.support.clients import create_topic

RECORD_OVERHEAD = 70  # bytes kafka-python adds per record in its size accounting (rough; batch header shared)


def log_end_offset(connection: BrokerConnection, topic: str) -> int:
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    response = connection.request(ApiKey.LIST_OFFSETS, body)
    return response["topics"][0]["partitions"][0]["offset"]


def wait_stored(connection: BrokerConnection, topic: str, count: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while log_end_offset(connection, topic) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker holds {log_end_offset(connection, topic)} of {count} messages of {topic}")
        time.sleep(0.002)


def ours_sync(bootstrap: str, topic: str, messages: int, size: int, batch: int, acks: int) -> None:
    payload = [b"m" * size] * batch
    with Producer({"metadata.broker.list": bootstrap, "request.required.acks": acks}) as producer:
        send = producer.send
        for _ in range(messages // batch):
            send(ProducerData(topic, None, payload))


def ours_async(bootstrap: str, topic: str, messages: int, size: int, batch: int, acks: int) -> None:
    payload = b"m" * size
    with Producer({"metadata.broker.list": bootstrap, "request.required.acks": acks, "producer.type": "async",
                   "batch.size": batch, "queue.time": 5, "queue.buffering.max.messages": max(10000, 20 * batch)}
                  ) as producer:
        send = producer.send
        for _ in range(messages):
            send(ProducerData(topic, None, [payload]))


def ours_async_batch(bootstrap: str, topic: str, messages: int, size: int, batch: int, acks: int) -> None:
    payload = [b"m" * size] * batch
    with Producer({"metadata.broker.list": bootstrap, "request.required.acks": acks, "producer.type": "async",
                   "batch.size": batch, "queue.time": 5, "queue.buffering.max.messages": max(10000, 20 * batch)}
                  ) as producer:
        send_batch = producer.send_batch
        for _ in range(messages // batch):
            send_batch(topic, payload)


def kafka_python(bootstrap: str, topic: str, messages: int, size: int, batch: int, acks: int) -> None:
    from kafka import KafkaProducer

    batching = {"linger_ms": 0 if batch == 1 else 5, "batch_size": batch * (size + RECORD_OVERHEAD)}
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, enable_idempotence=False, **batching)
    payload = b"m" * size
    try:
        send = producer.send
        for _ in range(messages):
            send(topic, payload)
        producer.flush()
    finally:
        producer.close()


CASES = {"ours-sync": ours_sync, "ours-async": ours_async, "ours-async-batch": ours_async_batch,
         "kafka-python": kafka_python}


def measure(broker: BrokerProcess, control: BrokerConnection, name: str, messages: int, size: int, batch: int,
            acks: int, profile: bool = False) -> tuple[float, float]:
    """(msg/s, CPU us per message of this process) of one case."""
    topic = f"{name}-b{batch}-a{acks}-{time.monotonic_ns()}"
    create_topic(broker.bootstrap, topic, 1)
    messages = messages // batch * batch
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    cpu = time.process_time()
    if profiler:
        profiler.enable()
    CASES[name](broker.bootstrap, topic, messages, size, batch, acks)
    if profiler:
        profiler.disable()
    cpu_us = (time.process_time() - cpu) / messages * 1e6
    wait_stored(control, topic, messages)
    elapsed = time.perf_counter() - started
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
    return messages / elapsed, cpu_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per case")
    parser.add_argument("--kafka-python-messages", type=int, default=None,
                        help="messages per kafka-python case (default: --messages)")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batches", default="1,50")
    parser.add_argument("--acks", default="0,1")
    parser.add_argument("--no-async", action="store_true")
    parser.add_argument("--no-kafka-python", action="store_true")
    parser.add_argument("--profile", default=None, help=f"profile one case: {', '.join(CASES)}")
    parser.add_argument("--cases", default=None, help=f"run only these cases (comma-separated: {', '.join(CASES)})")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every case, report the best")
    args = parser.parse_args()
    names = [n for n in CASES if not (args.no_async and n.startswith("ours-async"))
             and not (args.no_kafka_python and n == "kafka-python")
             and (args.cases is None or n in args.cases.split(","))]
    print(f"producer throughput, {args.size}-byte messages, one partition, broker on the same machine")
    with tempfile.TemporaryDirectory(prefix="producer-bench-") as tmp:
        with BrokerProcess(Path(tmp) / "logs", log_path=Path(tmp) / "broker.log") as broker:
            control = BrokerConnection(broker.host, broker.port, client_id="bench-control")
            control.connect()
            try:
                for batch in (int(b) for b in args.batches.split(",")):
                    for acks in (int(a) for a in args.acks.split(",")):
                        rates = {}
                        for name in names:
                            count = args.messages
                            if name == "kafka-python" and args.kafka_python_messages:
                                count = args.kafka_python_messages
                            runs = [measure(broker, control, name, count, args.size, batch, acks,
                                            profile=args.profile == name) for _ in range(args.rounds)]
                            rate, cpu_us = max(r for r, _ in runs), min(c for _, c in runs)
                            rates[name] = rate
                            print(f"  {name:<16} batch {batch:>3} acks {acks:>2}: {rate:>10,.0f} msg/s "
                                  f"{rate * args.size / 1e6:>7.1f} MB/s {cpu_us:>6.2f} us CPU/msg", flush=True)
                        if "kafka-python" in rates:
                            theirs = rates["kafka-python"]
                            ratios = ", ".join(f"{n}/kafka-python {r / theirs:.1f}x" for n, r in rates.items()
                                               if n != "kafka-python")
                            print(f"    batch {batch} acks {acks}: {ratios}")
            finally:
                control.close()


if __name__ == "__main__":
    main()
