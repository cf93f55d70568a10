"""The group coordinator's Prometheus metrics: groups by state (at scrape time) and its event counters."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.coordinator.group_metadata import GroupState


class GroupCoordinatorMetrics(Collector):
    """Kafka's GroupMetadataManager NumGroups* gauges and the coordinator's rebalance, commit and expiry counts."""

    def __init__(self) -> None:
        self.groups: Callable[[], list[GroupState]] = list
        self.rebalances = 0
        self.offset_commits = 0
        self.expired_offsets = 0
        self.expired_members = 0

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        states = Counter(self.groups())
        gauge = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_num_groups",
                                  "Groups this broker coordinates, by state (NumGroupsStable and the like)",
                                  labels=["state"])
        for state in GroupState:
            gauge.add_metric([state.value], states.get(state, 0))
        yield gauge
        for name, value, text in (
                ("rebalances", self.rebalances, "Rebalances begun (PreparingRebalance entered)"),
                ("offset_commits", self.offset_commits, "Partition offsets committed (OffsetCommits)"),
                ("expired_offsets", self.expired_offsets, "Committed offsets removed by retention (OffsetExpired)"),
                ("expired_members", self.expired_members, "Members removed because their session timed out")):
            counter = CounterMetricFamily(f"kafka_coordinator_group_groupcoordinator_{name}", text)
            counter.add_metric([], value)
            yield counter
