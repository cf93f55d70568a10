"""Real Kafka clients driven from tests: topic creation (kafka-python admin), kcat, and read-everything helpers.

These helpers only use public client APIs; they exist so every integration test creates topics and
drains partitions the same way, with deadlines.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

KCAT = shutil.which("kcat") or "kcat"


@dataclass(frozen=True)
class Record:
    """One consumed message: where it was and what it held."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def create_topic(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 15.0,
                 configs: dict[str, str] | None = None) -> None:
    """Create ``topic`` (with topic config overrides ``configs``) with CreateTopics through kafka-python's
    KafkaAdminClient; raise on any error."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-admin", request_timeout_ms=int(timeout * 1000))
    try:
        admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1, "configs": configs or {}}},
                            timeout_ms=int(timeout * 1000))
    finally:
        admin.close()


def run_kcat(args: Sequence[str], input_bytes: bytes | None = None, timeout: float = 120.0) -> bytes:
    """Run kcat with ``args``; return its stdout; raise with its stderr if it fails."""
    completed = subprocess.run(
        [KCAT, *args],
        input=input_bytes,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=timeout,
        check=False,
    )
    if completed.returncode != 0:
        raise AssertionError(f"kcat {' '.join(args)} exited {completed.returncode}: {completed.stderr.decode(errors='replace')[-2000:]}")
    return completed.stdout


def kafka_python_consume(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    expected: int,
    timeout: float = 60.0,
    **config: object,
) -> list[Record]:
    """Assign ``partitions`` (no group), seek to the beginning and poll until ``expected`` records arrived."""
    from kafka import KafkaConsumer, TopicPartition

    assignment = [TopicPartition(topic, p) for p in partitions]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **config)
    records: list[Record] = []
    try:
        consumer.assign(assignment)
        consumer.seek_to_beginning(*assignment)
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                records.extend(Record(tp.partition, m.offset, m.key, m.value, m.timestamp, tuple(m.headers))
                               for m in messages)
    finally:
        consumer.close()
    if len(records) < expected:
        raise AssertionError(f"kafka-python consumed {len(records)} of {expected} records from {topic} within {timeout}s")
    return records


def confluent_consume(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    expected: int,
    timeout: float = 60.0,
    **config: object,
) -> list[Record]:
    """confluent-kafka Consumer.assign from the beginning of ``partitions``; poll until ``expected`` arrived."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": "test-assign-only",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        **config,
    }
    consumer = Consumer(settings)
    records: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"confluent-kafka consumer error: {error}")
                records.append(Record(message.partition(), message.offset(), message.key(), message.value(), message.timestamp()[1]))
    finally:
        consumer.close()
    if len(records) < expected:
        raise AssertionError(f"confluent-kafka consumed {len(records)} of {expected} records from {topic} within {timeout}s")
    return records


def kafka_python_round_trip(bootstrap: str, topic: str, values: list[bytes], timeout: float = 60.0,
                            **config: object) -> list[bytes]:
    """kafka-python: produce ``values`` to ``topic`` (acks=all; the offsets must be 0, 1, ...), then read them
    back from the beginning of partition 0 with the same ``config`` (its security settings)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **config)
    try:
        futures = [producer.send(topic, value) for value in values]
        producer.flush(timeout=timeout)
        offsets = [future.get(timeout=10).offset for future in futures]
    finally:
        producer.close(timeout=10)
    if offsets != list(range(len(values))):
        raise AssertionError(f"kafka-python's records landed at offsets {offsets}")
    return [record.value for record in kafka_python_consume(bootstrap, topic, [0], len(values), timeout, **config)]


def by_partition(records: Iterable[Record]) -> dict[int, list[Record]]:
    """Group records by partition, keeping their order."""
    grouped: dict[int, list[Record]] = {}
    for record in records:
        grouped.setdefault(record.partition, []).append(record)
    return grouped


def aiokafka_round_trip(bootstrap: str, topic: str, values: list[bytes], settings: Callable[[], dict],
                        timeout: float = 60.0) -> list[bytes]:
    """aiokafka: produce ``values`` to partition 0 of ``topic`` (acks=all), then assign it and read it back from the
    beginning; ``settings()`` gives each client its own security settings (an SSL context is not shared)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **settings())
        await producer.start()
        try:
            for value in values:
                await producer.send(topic, value, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **settings())
        await consumer.start()
        received: list[bytes] = []
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            async with asyncio.timeout(timeout):
                while len(received) < len(values):
                    for messages in (await consumer.getmany(timeout_ms=500)).values():
                        received.extend(m.value for m in messages)
        finally:
            await consumer.stop()
        return received

    return asyncio.run(scenario())
