"""Consumer throughput: our SimpleConsumer and Consumer against kafka-python's KafkaConsumer, same broker, same run.

Starts a broker, loads MESSAGES records of SIZE bytes in batches of 50 (one pre-encoded batch sent in
pipelined Produce requests), then times each consumer reading all of them from offset 0, decoding
every record and touching every value. Prints msg/s, MB/s (of values) and ours / kafka-python.

    .venv/bin/python -m bench.consumer_bench [--messages 1000000] [--size 200] [--rounds 2] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path
from typing import Callable

from pipeline.client.consumer import Consumer
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.records import encode_batch
from tests.support import BrokerProcess
from tests.support.clients import create_topic
from tests.support.load import produce_bulk

TOPIC = "consumer-bench"
BATCH = 50
MiB = 1024 * 1024


def load(broker: BrokerProcess, messages: int, size: int) -> None:
    """Store ``messages`` records of ``size`` random bytes in partition 0, BATCH records per batch."""
    create_topic(broker.bootstrap, TOPIC, 1)
    batch = encode_batch([os.urandom(size) for _ in range(BATCH)])
    produce_bulk(broker.host, broker.port, TOPIC, batch, len(batch) * (messages // BATCH), in_flight=8)


def simple_consumer(broker: BrokerProcess, total: int, fetch_bytes: int) -> int:
    consumed = 0
    value_bytes = 0
    offset = 0
    with SimpleConsumer(broker.host, broker.port, buffer_size=fetch_bytes) as consumer:
        while offset < total:
            messages = consumer.fetch(FetchRequest(TOPIC, 0, offset))
            for message in messages:
                value_bytes += len(message.value)
                consumed += 1
            offset = messages.next_offset
    assert consumed == total, (consumed, total)
    return value_bytes


def our_consumer(broker: BrokerProcess, total: int, fetch_bytes: int) -> int:
    config = {"metadata.broker.list": broker.bootstrap, "fetch.message.max.bytes": fetch_bytes,
              "consumer.timeout.ms": 5000}
    value_bytes = 0
    consumed = 0
    with Consumer(config, partitions={(TOPIC, 0): "earliest"}) as consumer:
        for message in consumer:
            value_bytes += len(message.value)
            consumed += 1
            if consumed == total:
                break
    assert consumed == total, (consumed, total)
    return value_bytes


def kafka_python(broker: BrokerProcess, total: int, fetch_bytes: int | None) -> int:
    from kafka import KafkaConsumer, TopicPartition

    extra = {} if fetch_bytes is None else {"max_partition_fetch_bytes": fetch_bytes,
                                            "fetch_max_bytes": max(fetch_bytes, 50 * MiB)}
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, **extra)
    value_bytes = 0
    consumed = 0
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 600
        while consumed < total and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500, max_records=100_000).values():
                for message in messages:
                    value_bytes += len(message.value)
                consumed += len(messages)
    finally:
        consumer.close()
    assert consumed == total, (consumed, total)
    return value_bytes


def timed(label: str, run: Callable[[], int], total: int, profile: bool) -> float:
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    value_bytes = run()
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - started
    rate = total / elapsed
    print(f"  {label:<44} {rate:>10,.0f} msg/s {value_bytes / elapsed / MiB:>8.1f} MB/s  ({elapsed:.2f} s)", flush=True)
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="repeat every measurement, report the best")
    parser.add_argument("--profile", action="store_true", help="cProfile our consumers (slows them)")
    parser.add_argument("--skip-kafka-python", action="store_true")
    args = parser.parse_args()
    total = args.messages // BATCH * BATCH
    print(f"consumer bench: {total:,} records of {args.size} bytes, {BATCH} per batch, one partition")
    runs: list[tuple[str, Callable[[], int], str]] = [
        ("ours SimpleConsumer, 1 MiB fetches", lambda: simple_consumer(broker, total, MiB), "ours"),
        ("ours SimpleConsumer, 4 MiB fetches", lambda: simple_consumer(broker, total, 4 * MiB), "ours"),
        ("ours Consumer, 1 MiB fetches", lambda: our_consumer(broker, total, MiB), "ours"),
        ("ours Consumer, 4 MiB fetches", lambda: our_consumer(broker, total, 4 * MiB), "ours"),
    ]
    if not args.skip_kafka_python:
        runs += [
            ("kafka-python KafkaConsumer, defaults", lambda: kafka_python(broker, total, None), "theirs"),
            ("kafka-python, max_partition_fetch_bytes 4 MiB", lambda: kafka_python(broker, total, 4 * MiB), "theirs"),
        ]
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="consumer-bench-") as tmp:
        with BrokerProcess(Path(tmp) / "logs", log_path=Path(tmp) / "broker.log") as broker:
            started = time.perf_counter()
            load(broker, total, args.size)
            print(f"  loaded in {time.perf_counter() - started:.1f} s")
            for round_ in range(args.rounds):
                print(f" round {round_ + 1}")
                for label, run, side in runs:
                    rate = timed(label, run, total, args.profile and side == "ours")
                    best[label] = max(best.get(label, 0.0), rate)
    print(" best of rounds")
    for label, rate in best.items():
        print(f"  {label:<44} {rate:>10,.0f} msg/s")
    ours = max(rate for label, rate in best.items() if label.startswith("ours"))
    theirs = [rate for label, rate in best.items() if label.startswith("kafka-python")]
    if theirs:
        print(f"  ours / kafka-python (best each): {ours / max(theirs):.2f}x")


if __name__ == "__main__":
    main()
