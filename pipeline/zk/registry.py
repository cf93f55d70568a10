"""A read-only view of one cluster's ZooKeeper registries: brokers, controller, topics, consumer groups.

For tools that inspect a cluster (the `cluster` and `consumer-groups` commands, tests); the broker and
the clients keep their own watch-fed state. Every read is one or a few ZooKeeper calls, no caching, each
bounded by ``timeout_s`` (a ZooKeeper that is stopped or slow makes a read fail instead of hang).
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pipeline.zk import layout
from pipeline.zk.client import BoundedZooKeeper


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as it registered itself in /brokers/ids/<id>."""

    broker_id: int
    host: str
    port: int
    registered_ms: int


@dataclass(frozen=True)
class ConsumerInfo:
    """A member of a consumer group as registered in /consumers/<group>/ids/<id>."""

    consumer_id: str
    subscription: dict[str, int]
    pattern: str


class ClusterRegistry:
    """Reads the registries of the cluster the kazoo client is rooted at."""

    def __init__(self, zk: KazooClient, timeout_s: float = 10.0) -> None:
        self.zk = BoundedZooKeeper(zk, timeout_s)

    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def _data(self, path: str) -> bytes | None:
        try:
            return self.zk.get(path)[0]
        except NoNodeError:
            return None

    # -- brokers -------------------------------------------------------------------------------

    def brokers(self) -> dict[int, BrokerInfo]:
        found = {}
        for name in self._children(layout.BROKER_IDS):
            data = self._data(layout.broker_path(int(name)))
            if data is None:
                continue
            info = layout.decode(data)
            found[int(name)] = BrokerInfo(int(name), info["host"], int(info["port"]), int(info.get("timestamp", 0)))
        return dict(sorted(found.items()))

    def controller(self) -> int | None:
        data = self._data(layout.CONTROLLER)
        return None if data is None else int(layout.decode(data)["brokerid"])

    def controller_epoch(self) -> int | None:
        data = self._data(layout.CONTROLLER_EPOCH)
        if not data:
            return None
        text = data.decode().strip()
        return int(text) if text.isascii() and text.lstrip("-").isdigit() else int(layout.decode(data)["epoch"])

    def cluster_id(self) -> str | None:
        data = self._data(layout.CLUSTER_ID)
        return None if data is None else layout.decode(data).get("id")

    # -- topics --------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return sorted(self._children(layout.BROKER_TOPICS))

    def assignment(self, topic: str) -> dict[int, list[int]]:
        data = self._data(layout.topic_path(topic))
        return {} if data is None else layout.parse_topic_assignment(data)

    def partition_state(self, topic: str, partition: int) -> dict | None:
        data = self._data(layout.partition_state_path(topic, partition))
        return None if data is None else layout.decode(data)

    # -- consumer groups -------------------------------------------------------------------------

    def groups(self) -> list[str]:
        return sorted(self._children(layout.CONSUMERS))

    def members(self, group: str) -> list[ConsumerInfo]:
        members = []
        for consumer_id in sorted(self._children(layout.consumer_ids_path(group))):
            data = self._data(layout.consumer_path(group, consumer_id))
            if data is None:
                continue
            info = layout.decode(data)
            members.append(ConsumerInfo(consumer_id, dict(info.get("subscription", {})), info.get("pattern", "static")))
        return members

    def owners(self, group: str) -> dict[tuple[str, int], str]:
        owned = {}
        for topic in self._children(f"{layout.group_path(group)}/owners"):
            for partition in self._children(layout.owners_path(group, topic)):
                data = self._data(layout.owner_path(group, topic, int(partition)))
                if data is not None:
                    owned[(topic, int(partition))] = data.decode()
        return dict(sorted(owned.items()))

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        offsets = {}
        for topic in self._children(f"{layout.group_path(group)}/offsets"):
            for partition in self._children(layout.offsets_path(group, topic)):
                data = self._data(layout.offset_path(group, topic, int(partition)))
                if data:
                    offsets[(topic, int(partition))] = layout.parse_offset(data)
        return dict(sorted(offsets.items()))
