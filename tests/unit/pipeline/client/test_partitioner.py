"""DefaultPartitioner and murmur2 agree with kafka-python (and so with the Java client) on every key."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import DefaultPartitioner as KafkaPythonPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pipeline.client.partitioner import DefaultPartitioner, RoundRobinPartitioner, murmur2


class _FakeClusterMetadata:
    """What kafka-python's partitioner asks of its cluster metadata."""

    def __init__(self, topic: str, partitions: int) -> None:
        self._topic = topic
        self._partitions = set(range(partitions))

    def topics(self) -> set[str]:
        return {self._topic}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions


def test_murmur2_matches_kafka_python_for_random_keys() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        key = rng.randbytes(rng.randrange(0, 64))
        # kafka-python returns the hash unsigned; ours is Java's signed int32.
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key
        assert -(1 << 31) <= murmur2(key) < (1 << 31)


def test_murmur2_known_java_values() -> None:
    # Values of org.apache.kafka.common.utils.Utils.murmur2 (from Kafka's UtilsTest).
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 10, 16, 100, 1000])
def test_partition_matches_kafka_python(partitions: int) -> None:
    rng = random.Random(partitions)
    ours = DefaultPartitioner()
    theirs = KafkaPythonPartitioner()
    metadata = _FakeClusterMetadata("t", partitions)
    for _ in range(2000):
        key = rng.randbytes(rng.randrange(1, 40)) if rng.random() < 0.7 else str(rng.random()).encode()
        expected = theirs.partition("t", None, key, None, None, metadata)
        assert ours.partition(key, partitions) == expected
        assert ours.partition(key, partitions) == expected  # memoised hash gives the same answer


def test_null_key_spreads_over_all_partitions() -> None:
    partitioner = DefaultPartitioner()
    seen = {partitioner.partition(None, 5) for _ in range(500)}
    assert seen == set(range(5))


def test_round_robin_cycles() -> None:
    partitioner = RoundRobinPartitioner()
    assert sorted(partitioner.partition(b"same", 3) for _ in range(3)) == [0, 1, 2]
