"""mirror.service's pieces that need no clusters: the error that names lost offsets and how to skip them, and the
serializer that hands the producer a pending record's value as it came from the source, the batches read from a
stream (one record batch of one partition) and the runs of one source partition in a target batch."""

from __future__ import annotations

import threading
import pytest

from mirror.service import (LostOffsetsError, MirrorError, _Pending, _PendingValues, _pending, _runs, _sizes, hand_off,
                            take_batch)
from mirror.tracker import Gap, SourcePartition
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.consumer_stream import Chunk, ConsumerTimeout, KafkaStream, PartitionTopicInfo
from pipeline.client.producer import MessageSizeTooLargeError, ProducerData
from pipeline.client.sender import ProducerBatch
from pipeline.lineage import LineageStamp, lineage_headers
from pipeline.records import Record


def pending(value: bytes | None) -> _Pending:
    return _Pending(SourcePartition("dc1", "clicks", 0), "clicks", 0, 5, 1_000, b"key", value, ())


def test_lost_offsets_name_the_partition_the_range_the_count_and_the_setting_that_skips_them() -> None:
    gap = Gap(SourcePartition("dc1", "clicks", 3), 100, 250)
    error = LostOffsetsError(gap)
    assert isinstance(error, MirrorError) and error.gap is gap
    assert str(error) == ("source dc1: clicks-3 offsets 100..249 (150 records) were deleted by the source's retention "
                          "before they were mirrored; restart with skip.lost.offsets=true (--skip-lost-offsets) to "
                          "skip them")


def test_the_producer_sends_the_source_values_unchanged_and_a_null_value_stays_null() -> None:
    values = _PendingValues()
    assert values.encode(pending(b"\x00\x01avro")) == b"\x00\x01avro"
    assert values.encode(pending(None)) is None
    assert values.encode_all([pending(b"a"), pending(None), pending(b"c")]) == [b"a", None, b"c"]


def chunk_records(start: int, n: int) -> list[Record]:
    return [Record(offset, 1000 + offset, b"k%d" % offset, b"v%d" % offset, ()) for offset in range(start, start + n)]


def consumed(topic: str, partition: int, records: list[Record]) -> list[ConsumerRecord]:
    return [ConsumerRecord(topic, partition, *r) for r in records]


def test_a_batch_is_the_rest_of_a_fetched_record_batch_of_one_partition_in_offset_order() -> None:
    lock = threading.Lock()
    stream = KafkaStream("t-0", lock, 4, 50, acknowledge_on_next=False)
    first, second = PartitionTopicInfo("t", 3, stream.queue, 10, 1024), PartitionTopicInfo("u", 0, stream.queue, 0, 1024)
    stream.queue.put(Chunk(first, iter([chunk_records(10, 5), chunk_records(15, 2)]), end=18))
    stream.queue.put(Chunk(second, iter([chunk_records(0, 1)])))
    assert take_batch(stream) == ("t", 3, consumed("t", 3, chunk_records(10, 5)))
    assert take_batch(stream) == ("t", 3, consumed("t", 3, chunk_records(15, 2)))
    assert take_batch(stream) == ("u", 0, consumed("u", 0, chunk_records(0, 1)))
    assert stream.take_passed() == {("t", 3): 18}, "past the fetch's end, as reading it record by record"
    assert first.consumed_offset == 10, "without acknowledge_on_next nothing is marked consumed"
    with pytest.raises(ConsumerTimeout):
        take_batch(stream)


def test_records_of_a_partition_released_meanwhile_are_not_handed_out() -> None:
    lock = threading.Lock()
    stream = KafkaStream("t-0", lock, 4, 50, acknowledge_on_next=False)
    info = PartitionTopicInfo("t", 3, stream.queue, 10, 1024)
    stream.queue.put(Chunk(info, iter([chunk_records(10, 5)])))
    info.active = False
    with pytest.raises(ConsumerTimeout):
        take_batch(stream)


def test_pending_records_keep_their_source_partition_and_record_and_batches_split_into_runs_of_one_partition() -> None:
    p0, p1 = SourcePartition("dc1", "t", 0), SourcePartition("dc2", "t", 0)
    a, b = _pending(p0, consumed("t", 0, chunk_records(0, 3))), _pending(p1, consumed("t", 0, chunk_records(5, 2)))
    assert [tuple(m) for m in a] == [(p0, "t", 0, *r) for r in chunk_records(0, 3)]
    assert [(m.where, m.offset, m.timestamp, m.key, m.value, m.headers) for m in a] == \
        [(p0, r.offset, r.timestamp, r.key, r.value, r.headers) for r in chunk_records(0, 3)]
    assert all(type(m) is _Pending for m in a)
    assert [m.size for m in a] == _sizes(a) == [4, 4, 4]
    runs = list(_runs(a[:2] + b + a[2:]))
    assert [(where, [m.offset for m in run]) for where, run in runs] == [(p0, [0, 1]), (p1, [5, 6]), (p0, [2])]


class _Producer:
    """send_batch / send as the mirror uses them, refusing values longer than ``limit`` before queueing any."""

    def __init__(self, limit: int = 100) -> None:
        self.limit = limit
        self.batches: list[tuple] = []
        self.sent: list[ProducerData] = []

    def _refuse(self, values: list) -> None:
        too_big = [v for v in values if v is not None and len(v) > self.limit]
        if too_big:
            raise MessageSizeTooLargeError([(ProducerBatch("t", -1, None, [too_big[0]], None, 1), ValueError("big"))])

    def send_batch(self, topic: str, messages: list, **extras: object) -> None:
        self._refuse([m.value for m in messages])
        self.batches.append((topic, messages, extras))

    def send(self, data: ProducerData) -> None:
        self._refuse([m.value for m in data.messages])
        self.sent.append(data)


def test_a_partition_s_records_go_to_the_producer_in_one_call_with_their_keys_times_and_lineage() -> None:
    where = SourcePartition("dc1", "t", 2)
    messages = _pending(where, [ConsumerRecord("t", 2, 7, 1_000, b"k", b"v", (("h", b"x"),)),
                                ConsumerRecord("t", 2, 8, 1_001, None, None, ())])
    producer = _Producer()
    assert hand_off(producer, "t", 2, messages, LineageStamp(b"dc1", 2)) == []  # type: ignore[arg-type]
    assert producer.batches == [("t", messages, {
        "keys": [b"k", None], "partition": 2, "timestamps": [1_000, 1_001],
        "headers": [lineage_headers((("h", b"x"),), b"dc1", 2, 7), lineage_headers((), b"dc1", 2, 8)]})]


def test_refused_records_are_named_and_the_others_sent_one_by_one_or_in_a_transaction_none() -> None:
    where = SourcePartition("dc1", "t", 0)
    records = [ConsumerRecord("t", 0, o, -1 if o == 3 else 1_000 + o, b"k", b"x" * (500 if o in (2, 4) else 10), ())
               for o in range(6)]
    for ok_times in (True, False):
        messages = _pending(where, [r._replace(timestamp=1) for r in records] if ok_times else records)
        producer = _Producer()
        refused = hand_off(producer, "t", 0, messages, LineageStamp(b"dc1", 0))  # type: ignore[arg-type]
        assert [m.offset for m, _ in refused] == [2, 4]
        assert producer.batches == []
        assert [(d.messages[0].offset, d.timestamps, d.headers) for d in producer.sent] == [
            (o, None if not ok_times and o == 3 else [messages[o].timestamp], [lineage_headers((), b"dc1", 0, o)])
            for o in (0, 1, 3, 5)]
    messages = _pending(where, [r._replace(timestamp=1) for r in records])
    producer = _Producer()
    refused = hand_off(producer, "t", 0, messages, LineageStamp(b"dc1", 0), transactional=True)  # type: ignore[arg-type]
    assert [m.offset for m, _ in refused] == [2] and producer.sent == producer.batches == []
