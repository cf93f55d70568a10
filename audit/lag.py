"""Consumer groups from the outside (as Burrow does): the offsets every group committed in a cluster's ZooKeeper
(/consumers/GROUP/offsets/TOPIC/PARTITION, where our consumer connectors, the mirror and the ETL commit), and each
group's lag: the partition's latest offset minus the group's committed one."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pipeline.zk import layout

__all__ = ["committed_offsets", "group_lags", "source_offset_groups", "without_groups"]

GroupPartition = tuple[str, str, int]


def committed_offsets(zk: KazooClient) -> dict[GroupPartition, int]:
    """(group, topic, partition) -> the offset the group committed, for every committed offset."""
    committed: dict[GroupPartition, int] = {}
    try:
        groups = zk.get_children(layout.CONSUMERS)
    except NoNodeError:
        return {}
    for group in groups:
        try:
            topics = zk.get_children(f"{layout.CONSUMERS}/{group}/offsets")
        except NoNodeError:
            continue
        for topic in topics:
            try:
                partitions = zk.get_children(layout.offsets_path(group, topic))
            except NoNodeError:
                continue
            for partition in partitions:
                try:
                    data = zk.get(layout.offset_path(group, topic, int(partition)))[0]
                    committed[(group, topic, int(partition))] = layout.parse_offset(data)
                except (NoNodeError, ValueError):
                    continue
    return committed


def group_lags(committed: Mapping[GroupPartition, int],
               ends_of: Callable[[str], Mapping[int, int | None]]) -> dict[GroupPartition, int]:
    """(group, topic, partition) -> records the group has yet to commit past, given each topic's latest offsets."""
    ends: dict[str, Mapping[int, int | None]] = {}
    lags = {}
    for (group, topic, partition), offset in committed.items():
        if topic not in ends:
            ends[topic] = ends_of(topic)
        end = ends[topic].get(partition)
        if end is not None:
            lags[(group, topic, partition)] = max(0, end - offset)
    return lags


def source_offset_groups(mirror_group: str, clusters: Iterable[str], cluster: str) -> set[str]:
    """The groups of ``cluster`` that hold another cluster's offsets: an exactly-once mirror keeps the offsets of
    each source it copies into ``cluster`` in the group MIRROR_GROUP.SOURCE there. Their lag against ``cluster``'s
    own topics means nothing (the mirror's lag is its group's in each source)."""
    if not mirror_group:
        return set()
    return {f"{mirror_group}.{source}" for source in clusters if source != cluster}


def without_groups(committed: Mapping[GroupPartition, int], groups: set[str]) -> dict[GroupPartition, int]:
    """``committed`` without the offsets of ``groups``."""
    return {key: offset for key, offset in committed.items() if key[0] not in groups}
