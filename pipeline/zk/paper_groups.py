"""What the tools change in a paper (ZooKeeper) consumer group: its committed offsets and, once no consumer
is registered, the whole group (as Kafka 0.8's ConsumerGroupCommand did with --zookeeper).

A paper group is ``/consumers/<group>`` without the ``metadata`` znode of a broker-coordinated group; its
members register ephemerally under ``ids``. Offsets are written through pipeline.zk.layout, in the form
the paper's consumers read.
"""

from __future__ import annotations

from typing import Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from pipeline.zk import layout
from pipeline.zk.client import BoundedZooKeeper

TopicPartition = tuple[str, int]


class ActiveGroupError(Exception):
    """The group has consumers registered, so its offsets or its znodes must not be changed under them."""


def is_broker_group(zk: KazooClient, group: str, timeout_s: float) -> bool:
    """Whether ``/consumers/<group>`` belongs to a broker-coordinated group (it has the coordinator's record)."""
    return BoundedZooKeeper(zk, timeout_s).exists(layout.group_metadata_path(group)) is not None


def registered_members(zk: KazooClient, group: str, timeout_s: float) -> list[str]:
    """The ids of the consumers registered in the group now."""
    try:
        return sorted(BoundedZooKeeper(zk, timeout_s).get_children(layout.consumer_ids_path(group)))
    except NoNodeError:
        return []


def write_offsets(zk: KazooClient, group: str, offsets: Mapping[TopicPartition, int], timeout_s: float) -> None:
    """Set the group's committed offsets (the next offset each partition is read from)."""
    bounded = BoundedZooKeeper(zk, timeout_s)
    for (topic, partition), offset in sorted(offsets.items()):
        path = layout.offset_path(group, topic, partition)
        data = layout.offset_value(layout.OffsetValue(offset))
        try:
            bounded.set(path, data)
        except NoNodeError:
            try:
                bounded.create(path, data, makepath=True)
            except NodeExistsError:
                bounded.set(path, data)


def delete_group(zk: KazooClient, group: str, timeout_s: float) -> None:
    """Remove ``/consumers/<group>`` and everything below it; ActiveGroupError while consumers are registered
    (also when one registers during the delete, which then leaves its registration in place)."""
    members = registered_members(zk, group, timeout_s)
    if members:
        raise ActiveGroupError(f"group {group!r} has {len(members)} registered consumer(s): {', '.join(members)}")
    bounded = BoundedZooKeeper(zk, timeout_s)
    try:
        _delete_tree(bounded, layout.group_path(group))
    except NotEmptyError:
        raise ActiveGroupError(f"a consumer joined group {group!r} while it was being deleted") from None


def _delete_tree(zk: BoundedZooKeeper, path: str) -> None:
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return
    for child in children:
        _delete_tree(zk, f"{path}/{child}")
    try:
        zk.delete(path)
    except NoNodeError:
        pass
