"""Consumer-group lag from the outside (as Burrow does): for every group with offsets in a cluster's ZooKeeper
(/consumers/GROUP/offsets/TOPIC/PARTITION, where our consumer connectors, the mirror and the ETL commit),
the partition's latest offset minus the group's committed one."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pipeline.client.admin import AdminClient
from pipeline.zk import layout

__all__ = ["group_lags"]


def group_lags(zk: KazooClient, admin: AdminClient) -> dict[tuple[str, str, int], int]:
    """(group, topic, partition) -> records the group has yet to commit past, for every committed offset."""
    committed: dict[tuple[str, str, int], int] = {}
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
    ends: dict[str, dict[int, int | None]] = {}
    lags = {}
    for (group, topic, partition), offset in committed.items():
        if topic not in ends:
            ends[topic] = admin.list_offsets(topic)
        end = ends[topic].get(partition)
        if end is not None:
            lags[(group, topic, partition)] = max(0, end - offset)
    return lags
