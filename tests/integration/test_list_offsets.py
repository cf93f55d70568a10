"""ListOffsets through every client that exposes it: earliest, latest and by timestamp.

Each message is produced and acknowledged on its own, so it is its own batch and a timestamp lookup's
answer does not depend on how the broker searches inside a batch.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.support.clients import create_topic, run_kcat

COUNT = 30
STEP_MS = 1000


@pytest.fixture
def timestamped_topic(broker):
    """A one-partition topic holding COUNT messages with timestamps base, base+1s, ...; yields (topic, base)."""
    topic = "timestamps"
    create_topic(broker.bootstrap, topic, 1)
    base = (int(time.time() * 1000) - 3_600_000) // 1000 * 1000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, enable_idempotence=False, linger_ms=0)
    try:
        for i in range(COUNT):
            metadata = producer.send(topic, value=f"m{i}".encode(), partition=0, timestamp_ms=base + i * STEP_MS).get(timeout=10)
            assert metadata.offset == i
    finally:
        producer.close(timeout=10)
    return topic, base


def test_kafka_python_offsets(broker, timestamped_topic):
    topic, base = timestamped_topic
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: COUNT}
        found = consumer.offsets_for_times({tp: base + 10 * STEP_MS + 500})[tp]
        assert (found.offset, found.timestamp) == (11, base + 11 * STEP_MS)
        exact = consumer.offsets_for_times({tp: base + 5 * STEP_MS})[tp]
        assert (exact.offset, exact.timestamp) == (5, base + 5 * STEP_MS)
        assert consumer.offsets_for_times({tp: base - 60_000})[tp].offset == 0
        assert consumer.offsets_for_times({tp: base + COUNT * STEP_MS})[tp] is None
    finally:
        consumer.close()


def test_confluent_kafka_offsets(broker, timestamped_topic):
    topic, base = timestamped_topic
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "list-offsets-test", "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(ConfluentTopicPartition(topic, 0), timeout=10) == (0, COUNT)
        (found,) = consumer.offsets_for_times([ConfluentTopicPartition(topic, 0, base + 10 * STEP_MS + 500)], timeout=10)
        assert found.error is None and found.offset == 11
        (past_end,) = consumer.offsets_for_times([ConfluentTopicPartition(topic, 0, base + COUNT * STEP_MS)], timeout=10)
        assert past_end.offset == -1  # OFFSET_END: no message at or after that time
    finally:
        consumer.close()


def test_kcat_offsets(broker, timestamped_topic):
    topic, base = timestamped_topic
    query = run_kcat(["-b", broker.bootstrap, "-Q", "-t", f"{topic}:0:{base + 10 * STEP_MS + 500}"]).decode()
    assert f"{topic} [0] offset 11" in query, query
    latest = run_kcat(["-b", broker.bootstrap, "-Q", "-t", f"{topic}:0:-1"]).decode()
    assert f"{topic} [0] offset {COUNT}" in latest, latest
    earliest = run_kcat(["-b", broker.bootstrap, "-Q", "-t", f"{topic}:0:-2"]).decode()
    assert f"{topic} [0] offset 0" in earliest, earliest

    from_time = run_kcat(["-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", f"s@{base + 20 * STEP_MS}",
                          "-e", "-q", "-f", "%o %s\n"]).decode().splitlines()
    assert from_time == [f"{i} m{i}" for i in range(20, COUNT)]
