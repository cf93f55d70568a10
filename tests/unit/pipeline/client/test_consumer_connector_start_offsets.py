"""A rebalance listener may choose where the partitions it is handed start (the exactly-once mirror keeps its
offsets in another cluster): consumer_connector.start_offsets."""

from __future__ import annotations

import queue

from pipeline.client.consumer_connector import ConsumerRebalanceListener, start_offsets
from pipeline.client.consumer_stream import PartitionTopicInfo


class Choosing(ConsumerRebalanceListener):
    def __init__(self, starts: dict | None) -> None:
        self.starts = starts
        self.heard: dict = {}

    def before_starting_fetchers(self, partitions: dict) -> dict | None:
        self.heard = dict(partitions)
        return self.starts


def infos() -> dict:
    chunks: queue.Queue[object] = queue.Queue()
    return {("ev", 0): PartitionTopicInfo("ev", 0, chunks, 5, 1024),
            ("ev", 1): PartitionTopicInfo("ev", 1, chunks, None, 1024)}


def test_the_listener_hears_the_committed_offsets_and_what_it_returns_is_where_fetching_starts() -> None:
    given = infos()
    listener = Choosing({("ev", 0): 42, ("ev", 1): None})
    started = start_offsets(listener, given)
    assert listener.heard == {("ev", 0): 5, ("ev", 1): None}
    first = started[("ev", 0)]
    assert (first.fetch_offset, first.consumed_offset, first.committed_offset) == (42, 42, 42)
    assert first.queue is given[("ev", 0)].queue and first.fetch_size == 1024
    # None leaves the partition as it was (auto.offset.reset applies).
    assert started[("ev", 1)] is given[("ev", 1)]


def test_a_listener_that_returns_nothing_or_no_listener_changes_nothing() -> None:
    given = infos()
    assert start_offsets(Choosing(None), given) is given
    assert start_offsets(None, given) is given
