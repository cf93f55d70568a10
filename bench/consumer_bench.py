"""Consumer throughput: our SimpleConsumer and Consumer against kafka-python's KafkaConsumer, same broker, same run.

Starts a broker, loads MESSAGES records of SIZE bytes in batches of 50 (one pre-encoded batch sent in
pipelined Produce requests), then times each consumer reading all of them from offset 0, decoding
every record and touching every value. Prints msg/s, MB/s (of values), the CPU this process spent per
record (all its threads: decode, fetch, connection reads; the broker is another process) and ours /
kafka-python. The KafkaStream cases read through a StaticConsumerConnector's stream (the mirror's and the
audit's path: fetcher thread, chunk queue) with ``next()`` per record or ``next_batch()``.

    .venv/bin/python -m bench.consumer_bench [--messages 1000000] [--size 200] [--rounds 2] [--profile]
                                             [--skip-kafka-python] [--only ours-stream]
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


def our_stream(broker: BrokerProcess, total: int, fetch_bytes: int, batched: bool) -> int:
    from pipeline.client.offset_store import FileOffsetStore
    from pipeline.client.static_connector import StaticConsumerConnector
    from pipeline.client.topic_filter import Whitelist

    config = {"metadata.broker.list": broker.bootstrap, "fetch.message.max.bytes": fetch_bytes,
              "consumer.timeout.ms": 5000, "auto.offset.reset": "smallest"}
    value_bytes = 0
    consumed = 0
    with tempfile.TemporaryDirectory(prefix="consumer-bench-offsets-") as tmp:
        connector = StaticConsumerConnector(config, FileOffsetStore(Path(tmp) / "offsets"))
        try:
            (stream,) = connector.create_message_streams_by_filter(Whitelist(TOPIC), 1)
            if batched:
                take = stream.next_batch
                while consumed < total:
                    records = take()
                    for message in records:
                        value_bytes += len(message.value)
                    consumed += len(records)
            else:
                for message in stream:
                    value_bytes += len(message.value)
                    consumed += 1
                    if consumed == total:
                        break
        finally:
            connector.shutdown()
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


def timed(label: str, run: Callable[[], int], total: int, profile: bool) -> tuple[float, float]:
    """(msg/s, CPU us per record of this process) of one run."""
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    cpu = time.process_time()
    if profiler:
        profiler.enable()
    value_bytes = run()
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - started
    cpu_us = (time.process_time() - cpu) / total * 1e6
    rate = total / elapsed
    print(f"  {label:<44} {rate:>10,.0f} msg/s {value_bytes / elapsed / MiB:>8.1f} MB/s {cpu_us:>6.2f} us CPU/record"
          f"  ({elapsed:.2f} s)", flush=True)
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return rate, cpu_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="repeat every measurement, report the best")
    parser.add_argument("--profile", action="store_true", help="cProfile our consumers (slows them)")
    parser.add_argument("--skip-kafka-python", action="store_true")
    parser.add_argument("--only", default=None, help="run only the cases whose label contains this (e.g. stream)")
    args = parser.parse_args()
    total = args.messages // BATCH * BATCH
    print(f"consumer bench: {total:,} records of {args.size} bytes, {BATCH} per batch, one partition")
    runs: list[tuple[str, Callable[[], int], str]] = [
        ("ours SimpleConsumer, 1 MiB fetches", lambda: simple_consumer(broker, total, MiB), "ours"),
        ("ours SimpleConsumer, 4 MiB fetches", lambda: simple_consumer(broker, total, 4 * MiB), "ours"),
        ("ours Consumer, 1 MiB fetches", lambda: our_consumer(broker, total, MiB), "ours"),
        ("ours Consumer, 4 MiB fetches", lambda: our_consumer(broker, total, 4 * MiB), "ours"),
        ("ours KafkaStream next(), 1 MiB fetches", lambda: our_stream(broker, total, MiB, False), "ours"),
        ("ours KafkaStream next_batch(), 1 MiB fetches", lambda: our_stream(broker, total, MiB, True), "ours"),
    ]
    if not args.skip_kafka_python:
        runs += [
            ("kafka-python KafkaConsumer, defaults", lambda: kafka_python(broker, total, None), "theirs"),
            ("kafka-python, max_partition_fetch_bytes 4 MiB", lambda: kafka_python(broker, total, 4 * MiB), "theirs"),
        ]
    if args.only:
        runs = [run for run in runs if args.only in run[0]]
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="consumer-bench-") as tmp:
        with BrokerProcess(Path(tmp) / "logs", log_path=Path(tmp) / "broker.log") as broker:
            started = time.perf_counter()
            load(broker, total, args.size)
            print(f"  loaded in {time.perf_counter() - started:.1f} s")
            for round_ in range(args.rounds):
                print(f" round {round_ + 1}")
                for label, run, side in runs:
                    rate, cpu_us = timed(label, run, total, args.profile and side == "ours")
                    best[label] = max(best.get(label, 0.0), rate)
                    cpu[label] = min(cpu.get(label, cpu_us), cpu_us)
    print(" best of rounds")
    for label, rate in best.items():
        print(f"  {label:<44} {rate:>10,.0f} msg/s {cpu[label]:>6.2f} us CPU/record")
    ours = max((rate for label, rate in best.items() if label.startswith("ours")), default=0.0)
    theirs = [rate for label, rate in best.items() if label.startswith("kafka-python")]
    if theirs:
        print(f"  ours / kafka-python (best each): {ours / max(theirs):.2f}x")


if __name__ == "__main__":
    main()
