"""ListOffsets through every client that exposes it: earliest, latest and by timestamp.

In ``timestamped_topic`` each message is produced and acknowledged on its own, so it is its own batch;
``batched_topic`` holds batches of several records with distinct timestamps, plain and compressed,
where the answer must be the first record whose own timestamp reaches the target, as Kafka's.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from pipeline.protocol.compression import GZIP, LZ4
from pipeline.records import encode_batch
from tests.support.clients import create_topic, run_kcat
from tests.support.wire import KafkaConnection, produce

COUNT = 30
STEP_MS = 1000


def an_hour_ago() -> int:
    """A whole second about an hour ago, in ms: old enough to be in the past, new enough for retention."""
    return (int(time.time() * 1000) - 3_600_000) // 1000 * 1000


@pytest.fixture
def timestamped_topic(broker):
    """A one-partition topic holding COUNT messages with timestamps base, base+1s, ...; yields (topic, base)."""
    topic = "timestamps"
    create_topic(broker.bootstrap, topic, 1)
    base = an_hour_ago()
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


BATCH = 5


@pytest.fixture
def batched_topic(broker):
    """Three batches of BATCH records (plain, gzip, lz4), record i stamped base + i seconds; yields (topic, base)."""
    topic = "batched-timestamps"
    create_topic(broker.bootstrap, topic, 1)
    base = an_hour_ago()
    with KafkaConnection(broker.host, broker.port) as conn:
        for n, codec in enumerate((0, GZIP, LZ4)):
            first = n * BATCH
            batch = encode_batch([f"m{first + i}".encode() * 20 for i in range(BATCH)],
                                 timestamps=[base + (first + i) * STEP_MS for i in range(BATCH)], compression=codec)
            result = produce(conn, topic, 0, batch)
            assert (result.error_code, result.base_offset) == (0, first)
    return topic, base


# target (seconds after base) -> the offset of the first record at or after it; 3 * BATCH: none
BATCHED_CASES = [(-60, 0), (2.5, 3), (3, 3), (4.5, 5), (6, 6), (7.5, 8), (12.2, 13), (14, 14), (15, None)]


def test_kafka_python_offsets_inside_batches(broker, batched_topic):
    topic, base = batched_topic
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        for seconds, offset in BATCHED_CASES:
            found = consumer.offsets_for_times({tp: base + int(seconds * STEP_MS)})[tp]
            if offset is None:
                assert found is None
            else:
                assert (found.offset, found.timestamp) == (offset, base + offset * STEP_MS), seconds
    finally:
        consumer.close()


def test_confluent_kafka_offsets_inside_batches(broker, batched_topic):
    topic, base = batched_topic
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "list-offsets-batched",
                         "enable.auto.commit": False})
    try:
        for seconds, offset in BATCHED_CASES:
            query = ConfluentTopicPartition(topic, 0, base + int(seconds * STEP_MS))
            (found,) = consumer.offsets_for_times([query], timeout=10)
            assert found.error is None
            assert found.offset == (-1 if offset is None else offset), seconds
    finally:
        consumer.close()
