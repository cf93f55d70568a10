"""mirror.service's pieces that need no clusters: the error that names lost offsets and how to skip them, and the
serializer that hands the producer a pending record's value as it came from the source, the batches read from a
stream (one fetched chunk of one partition) and the runs of one source partition in a target batch."""

from __future__ import annotations

import threading
from typing import Iterator

import pytest

from mirror.service import LostOffsetsError, MirrorError, _Pending, _PendingValues, _pending, _runs, _sizes, take_batch
from mirror.tracker import Gap, SourcePartition
from pipeline.client.consumer_stream import Chunk, ConsumerTimeout, KafkaStream, PartitionTopicInfo
from pipeline.records import Record


def pending(value: bytes | None) -> _Pending:
    return _Pending(SourcePartition("dc1", "clicks", 0), 5, 1_000, b"key", value, [])


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


def test_a_batch_is_the_rest_of_the_fetched_chunk_of_one_partition_in_offset_order() -> None:
    lock = threading.Lock()
    stream = KafkaStream("t-0", lock, 4, 50, acknowledge_on_next=False)
    first, second = PartitionTopicInfo("t", 3, stream.queue, 10, 1024), PartitionTopicInfo("u", 0, stream.queue, 0, 1024)
    stream.queue.put(Chunk(first, iter(chunk_records(10, 5)), end=17))
    stream.queue.put(Chunk(second, iter(chunk_records(0, 1))))
    assert take_batch(stream) == ("t", 3, chunk_records(10, 5))
    assert stream.take_passed() == {("t", 3): 17}, "past the chunk's end, as reading it record by record"
    assert first.consumed_offset == 10, "without acknowledge_on_next nothing is marked consumed"
    assert take_batch(stream) == ("u", 0, chunk_records(0, 1))
    with pytest.raises(ConsumerTimeout):
        take_batch(stream)


def test_the_rest_of_a_chunk_whose_partition_was_released_meanwhile_is_not_handed_out() -> None:
    lock = threading.Lock()
    stream = KafkaStream("t-0", lock, 4, 50, acknowledge_on_next=False)
    info = PartitionTopicInfo("t", 3, stream.queue, 10, 1024)
    stream.queue.put(Chunk(info, iter(chunk_records(10, 5))))
    info.active = False
    with pytest.raises(ConsumerTimeout):
        take_batch(stream)
    info.active = True
    stream.queue.put(Chunk(info, iter(chunk_records(10, 5))))
    original = iter(chunk_records(10, 5))

    def released_after_the_first() -> Iterator[Record]:
        yield next(original)
        info.active = False
        yield from original

    stream.queue.put(Chunk(info, released_after_the_first()))
    assert take_batch(stream) == ("t", 3, chunk_records(10, 5))
    assert take_batch(stream) == ("t", 3, chunk_records(10, 1))


def test_pending_records_keep_their_source_partition_and_record_and_batches_split_into_runs_of_one_partition() -> None:
    p0, p1 = SourcePartition("dc1", "t", 0), SourcePartition("dc2", "t", 0)
    a, b = _pending(p0, chunk_records(0, 3)), _pending(p1, chunk_records(5, 2))
    assert [(m.where, m.offset, m.timestamp, m.key, m.value, m.headers) for m in a] == \
        [(p0, r.offset, r.timestamp, r.key, r.value, r.headers) for r in chunk_records(0, 3)]
    assert [m.size for m in a] == _sizes(a) == [4, 4, 4]
    runs = list(_runs(a[:2] + b + a[2:]))
    assert [(where, [m.offset for m in run]) for where, run in runs] == [(p0, [0, 1]), (p1, [5, 6]), (p0, [2])]
