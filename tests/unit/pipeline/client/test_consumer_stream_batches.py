"""KafkaStream.next_batch: the records next() hands out, a record batch at a time, with the same offsets."""

from __future__ import annotations

import random
import threading

import pytest

from pipeline.client.consumer_stream import Chunk, ConsumerTimeout, KafkaStream, PartitionTopicInfo
from pipeline.records import Record


def records(start: int, n: int) -> list[Record]:
    return [Record(offset, 1000 + offset, b"k", f"v{offset}".encode(), ()) for offset in range(start, start + n)]


def _fetches(rng: random.Random, start: int) -> list[tuple[list[list[Record]], int]]:
    """Fetch results: their record batches (some empty) and the offset after each."""
    fetches = []
    for _ in range(rng.randrange(1, 4)):
        batches = []
        for _ in range(rng.randrange(0, 4)):
            n = rng.randrange(0, 5)
            batches.append(records(start, n))
            start += n
        start += rng.choice([0, 0, 2])  # what read_committed left out
        fetches.append((batches, start))
    return fetches


@pytest.mark.parametrize("seed", range(30))
def test_next_batch_and_next_mixed_hand_out_what_next_alone_does(seed: int) -> None:
    rng = random.Random(seed)
    streams = [KafkaStream(f"s{i}", threading.Lock(), 100, 20) for i in range(2)]
    infos = [PartitionTopicInfo("t", 2, s.queue, 0, 1024) for s in streams]
    for batches, end in _fetches(rng, 0):
        for stream, info in zip(streams, infos):
            stream.queue.put(Chunk(info, iter(batches), end))
    expected = []
    while True:
        try:
            expected.append(next(streams[0]))
        except ConsumerTimeout:
            break
    got = []
    while True:
        try:
            batch = streams[1].next_batch() if rng.random() < 0.6 else [next(streams[1])]
        except ConsumerTimeout:
            break
        assert batch and len({r.partition for r in batch}) == 1
        assert infos[1].consumed_offset <= batch[0].offset, "handed out, not yet consumed"
        got.extend(batch)
    assert got == expected
    assert infos[1].consumed_offset == infos[0].consumed_offset
    assert streams[1].take_passed() == streams[0].take_passed()


def test_a_batch_counts_as_consumed_once_the_next_is_asked_for_or_acknowledged() -> None:
    stream = KafkaStream("s", threading.Lock(), 4, 20)
    info = PartitionTopicInfo("t", 0, stream.queue, 10, 1024)
    stream.queue.put(Chunk(info, iter([records(10, 3), records(13, 2)])))
    first = stream.next_batch()
    assert [r.offset for r in first] == [10, 11, 12] and first[0].topic == "t"
    assert info.consumed_offset == 10
    assert [r.offset for r in stream.next_batch()] == [13, 14]
    assert info.consumed_offset == 13
    stream.acknowledge()
    assert info.consumed_offset == 15
    with pytest.raises(ConsumerTimeout):
        stream.next_batch()


def test_next_batch_after_next_hands_out_the_rest_of_the_record_batch() -> None:
    stream = KafkaStream("s", threading.Lock(), 4, 20)
    info = PartitionTopicInfo("t", 0, stream.queue, 0, 1024)
    stream.queue.put(Chunk(info, iter([records(0, 4)])))
    assert next(stream).offset == 0
    assert [r.offset for r in stream.next_batch()] == [1, 2, 3]
    assert info.consumed_offset == 1


def test_a_released_partition_hands_out_no_batch_and_shutdown_ends_next_batch() -> None:
    lock = threading.Lock()
    stream = KafkaStream("s", lock, 4, 20)
    old = PartitionTopicInfo("t", 0, stream.queue, 0, 1024)
    stream.queue.put(Chunk(old, iter([records(0, 2), records(2, 2)])))
    assert [r.offset for r in stream.next_batch()] == [0, 1]
    with lock:
        old.active = False
    with pytest.raises(ConsumerTimeout):
        stream.next_batch()
    assert old.consumed_offset == 2
    stream.shutdown()
    with pytest.raises(StopIteration):
        stream.next_batch()
