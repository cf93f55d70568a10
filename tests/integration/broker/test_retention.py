"""Retention through the broker: old segments go (by size and by age), the earliest offset moves up,
and a fetch below it is OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import OffsetOutOfRangeError
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.support import wait_until
from tests.support.clients import create_topic, kafka_python_consume
from tests.support.wire import KafkaConnection, produce

SEGMENT_BYTES = 8192
RETENTION_BYTES = 16384


def batch_of(values: list[bytes], timestamp_ms: int | None = None) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=timestamp_ms, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_batches(broker, topic: str, batches: int, per_batch: int = 5, timestamp_ms: int | None = None) -> list[bytes]:
    """Produce ``batches`` raw batches of ``per_batch`` ~400-byte values; return all values in offset order."""
    values = []
    with KafkaConnection(broker.host, broker.port) as conn:
        for b in range(batches):
            chunk = [f"batch {b} record {r} ".encode().ljust(400, b".") for r in range(per_batch)]
            result = produce(conn, topic, 0, batch_of(chunk, timestamp_ms))
            assert result.error_code == 0, f"produce failed with error {result.error_code}"
            assert result.base_offset == len(values)
            values.extend(chunk)
    return values


def earliest_and_latest(bootstrap: str, topic: str) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def test_size_retention_deletes_old_segments_and_moves_earliest_offset(broker_factory):
    broker = broker_factory(overrides={
        "log.segment.bytes": SEGMENT_BYTES,
        "log.retention.bytes": RETENTION_BYTES,
        "log.retention.check.interval.ms": 200,
    })
    topic = "retained"
    create_topic(broker.bootstrap, topic, 1)
    values = produce_batches(broker, topic, batches=100)
    total = len(values)
    partition_dir = broker.partition_dir(topic, 0)

    def retained_size() -> int:
        total = 0
        for path in broker.segment_files(topic, 0):
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                pass  # renamed for deletion by a retention run between the listing and the stat
        return total

    wait_until(lambda: retained_size() <= RETENTION_BYTES + SEGMENT_BYTES, timeout=20,
               message=lambda: f"retention to shrink {partition_dir} (now {retained_size()} bytes)")
    segments = broker.segment_files(topic, 0)
    assert len(segments) >= 2, "retention by size must keep the newest segments, including the active one"
    first_base = int(segments[0].stem)
    assert first_base > 0
    for suffix in (".index", ".timeindex"):
        assert not any(int(p.stem) < first_base for p in partition_dir.glob(f"*{suffix}")), f"stale {suffix} files left"

    earliest, latest = earliest_and_latest(broker.bootstrap, topic)
    assert (earliest, latest) == (first_base, total)
    records = kafka_python_consume(broker.bootstrap, topic, [0], total - earliest)
    assert [r.offset for r in records] == list(range(earliest, total))
    assert [r.value for r in records] == values[earliest:]

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="none")
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def test_time_retention_deletes_segments_older_than_retention_ms_but_not_the_active_one(broker_factory):
    broker = broker_factory(overrides={
        "log.segment.bytes": SEGMENT_BYTES,
        "log.retention.ms": 60_000,
        "log.retention.check.interval.ms": 200,
    })
    topic = "aged"
    create_topic(broker.bootstrap, topic, 1)
    two_hours_ago = int(time.time() * 1000) - 7_200_000
    values = produce_batches(broker, topic, batches=30, timestamp_ms=two_hours_ago)

    wait_until(lambda: len(broker.segment_files(topic, 0)) == 1, timeout=20,
               message=lambda: f"only the active segment to remain (have {len(broker.segment_files(topic, 0))})")
    (active,) = broker.segment_files(topic, 0)
    assert active.stat().st_size > 0 or int(active.stem) == len(values)
    earliest, latest = earliest_and_latest(broker.bootstrap, topic)
    assert (earliest, latest) == (int(active.stem), len(values))
