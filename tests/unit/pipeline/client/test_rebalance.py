"""Algorithm 1 (range assignment per topic) as a pure function."""

from __future__ import annotations

import pytest

from pipeline.client.rebalance import (
    StreamId,
    consumer_assignment,
    group_assignment,
    range_assignment,
    streams_of,
)


def test_twelve_partitions_three_consumers_get_four_contiguous_each() -> None:
    streams = [StreamId(c, 0) for c in ("c-b", "c-a", "c-c")]
    assignment = range_assignment(range(12), streams)
    assert assignment == {StreamId("c-a", 0): [0, 1, 2, 3], StreamId("c-b", 0): [4, 5, 6, 7],
                          StreamId("c-c", 0): [8, 9, 10, 11]}


@pytest.mark.parametrize("partitions, consumers, sizes", [
    (10, 3, [4, 3, 3]), (11, 3, [4, 4, 3]), (7, 2, [4, 3]), (5, 5, [1, 1, 1, 1, 1]), (13, 4, [4, 3, 3, 3]),
])
def test_uneven_splits_give_the_remainder_to_the_first_streams(partitions: int, consumers: int,
                                                               sizes: list[int]) -> None:
    streams = [StreamId(f"c{i}", 0) for i in range(consumers)]
    assignment = range_assignment(list(range(partitions)), streams)
    assert [len(assignment[s]) for s in sorted(streams)] == sizes
    flat = [p for s in sorted(streams) for p in assignment[s]]
    assert flat == list(range(partitions)), "ranges are contiguous, in order, and cover every partition once"


def test_more_streams_than_partitions_leaves_the_last_streams_idle() -> None:
    streams = [StreamId(f"c{i}", 0) for i in range(5)]
    assignment = range_assignment([2, 0, 1], streams)
    assert [assignment[s] for s in sorted(streams)] == [[0], [1], [2], [], []]


def test_several_streams_per_consumer_sort_by_consumer_then_index() -> None:
    streams = streams_of("a", 2) + streams_of("b", 2)
    assignment = range_assignment(range(8), streams)
    assert assignment[StreamId("a", 0)] == [0, 1]
    assert assignment[StreamId("a", 1)] == [2, 3]
    assert assignment[StreamId("b", 0)] == [4, 5]
    assert assignment[StreamId("b", 1)] == [6, 7]


def test_stream_index_sorts_numerically_not_as_text() -> None:
    streams = streams_of("a", 11)
    assignment = range_assignment(range(11), streams)
    assert assignment[StreamId("a", 10)] == [10]
    assert assignment[StreamId("a", 2)] == [2]


def test_every_consumer_computes_the_same_group_assignment_and_no_partition_has_two_owners() -> None:
    partitions = {"clicks": list(range(12)), "views": list(range(5))}
    streams = {"clicks": streams_of("x", 1) + streams_of("y", 2), "views": streams_of("y", 1) + streams_of("z", 1)}
    owners = group_assignment(partitions, streams)
    assert len(owners) == 17
    mine = {c: consumer_assignment(c, partitions, streams) for c in ("x", "y", "z")}
    union = [tp for c in mine.values() for tp in c]
    assert sorted(union) == sorted(owners) and len(union) == len(set(union))
    assert mine["x"] == {("clicks", p): 0 for p in range(4)}
    assert mine["y"] == {**{("clicks", p): 0 for p in range(4, 8)}, **{("clicks", p): 1 for p in range(8, 12)},
                         **{("views", p): 0 for p in range(3)}}
    assert mine["z"] == {("views", 3): 0, ("views", 4): 0}


def test_topic_without_partitions_or_streams_assigns_nothing() -> None:
    assert group_assignment({"t": []}, {"t": streams_of("a", 1)}) == {}
    assert group_assignment({"t": [0, 1]}, {}) == {}
    assert range_assignment([0, 1], []) == {}


def test_stream_id_text_is_consumer_dash_index() -> None:
    assert str(StreamId("group_host-1234", 3)) == "group_host-1234-3"
