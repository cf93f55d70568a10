"""Algorithm 1 of the Kafka paper as a pure function: which consumer stream owns which partition.

For every topic T: P_T = the partitions of T sorted, C_T = every consumer stream of the group subscribed
to T sorted (by consumer id, then stream index), N = |P_T| / |C_T|; stream i gets the contiguous range
i*N .. (i+1)*N - 1, and the first |P_T| mod |C_T| streams one partition more each. Every consumer runs
this on the same view of ZooKeeper and so reaches the same assignment without talking to the others.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence


class StreamId(NamedTuple):
    """One consumer stream of a group: the consumer's registration id and the stream's index in it."""

    consumer_id: str
    index: int

    def __str__(self) -> str:
        return f"{self.consumer_id}-{self.index}"


TopicPartition = tuple[str, int]


def streams_of(consumer_id: str, count: int) -> list[StreamId]:
    """The ``count`` streams a consumer registered for one topic."""
    return [StreamId(consumer_id, index) for index in range(count)]


def range_assignment(partitions: Sequence[int], streams: Sequence[StreamId]) -> dict[StreamId, list[int]]:
    """Algorithm 1 for one topic: each stream's contiguous range of the sorted partitions.

    Streams beyond the partition count get an empty list.
    """
    ordered_partitions = sorted(partitions)
    ordered_streams = sorted(set(streams))
    if not ordered_streams:
        return {}
    share, extra = divmod(len(ordered_partitions), len(ordered_streams))
    assignment = {}
    for i, stream in enumerate(ordered_streams):
        start = i * share + min(i, extra)
        count = share + (1 if i < extra else 0)
        assignment[stream] = ordered_partitions[start:start + count]
    return assignment


def group_assignment(partitions_by_topic: Mapping[str, Sequence[int]],
                     streams_by_topic: Mapping[str, Sequence[StreamId]]) -> dict[TopicPartition, StreamId]:
    """The owner stream of every partition of every topic that has partitions and subscribed streams."""
    owners: dict[TopicPartition, StreamId] = {}
    for topic, streams in streams_by_topic.items():
        for stream, assigned in range_assignment(partitions_by_topic.get(topic, ()), streams).items():
            for partition in assigned:
                owners[(topic, partition)] = stream
    return owners


def consumer_assignment(consumer_id: str, partitions_by_topic: Mapping[str, Sequence[int]],
                        streams_by_topic: Mapping[str, Sequence[StreamId]]) -> dict[TopicPartition, int]:
    """The partitions ``consumer_id`` owns after a rebalance, each with the index of the stream that reads it."""
    return {tp: stream.index
            for tp, stream in group_assignment(partitions_by_topic, streams_by_topic).items()
            if stream.consumer_id == consumer_id}
