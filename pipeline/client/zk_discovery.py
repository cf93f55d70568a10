"""Brokers, topics and partition leaders from a cluster's ZooKeeper registry, kept current by watches.

:class:`ZooKeeperBrokerDiscovery` is a :class:`pipeline.client.cluster.BrokerDiscovery` that also answers
what a Metadata request would (``metadata()``): the live brokers of /brokers/ids, each topic's partitions
from /brokers/topics/<topic> and each partition's leader from its state node. Every read leaves a watch;
any change bumps ``version`` and calls the registered listeners, so a :class:`Cluster` built on it reads
ZooKeeper again on its next use instead of waiting for an error or for the metadata to age. A partition
whose leader is not a live broker is reported leaderless (LEADER_NOT_AVAILABLE), as a broker would.
Every ZooKeeper request is bounded (:class:`pipeline.zk.client.BoundedZooKeeper`): when ZooKeeper is slow
or gone a read fails with KafkaConnectionError within the timeout instead of hanging.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent

from pipeline.client.errors import KafkaConnectionError
from pipeline.protocol.errors import ErrorCode
from pipeline.zk import layout
from pipeline.zk.client import DEFAULT_SESSION_TIMEOUT_S, BoundedZooKeeper, connect

__all__ = ["ZooKeeperBrokerDiscovery"]

log = logging.getLogger(__name__)


class ZooKeeperBrokerDiscovery:
    """Bootstrap brokers and the whole topic layout from ZooKeeper (``zookeeper.connect``).

    Give a connect string (``host:port[,...]/chroot``; the client is then owned and closed by ``close()``)
    or an already started kazoo client rooted at the cluster's chroot (left open). ``timeout_s`` bounds the
    first connection and every request.
    """

    def __init__(self, zookeeper: str | KazooClient, *, timeout_s: float = 15.0,
                 session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S) -> None:
        if isinstance(zookeeper, str):
            self.zk = connect(zookeeper, timeout_s=timeout_s, session_timeout_s=session_timeout_s)
            self._owns_client = True
        else:
            self.zk = zookeeper
            self._owns_client = False
        self._requests = BoundedZooKeeper(self.zk, timeout_s)
        #: Bumped by every watched change; a reader compares it with the value it read at.
        self.version = 0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        # (the topics asked for, None: all) -> (version it was read at, the answer): while no watch fired and the
        # connection stayed up, ZooKeeper holds the same, and the answer is given again without reading it.
        self._answers: dict[tuple[str, ...] | None, tuple[int, dict]] = {}
        self.zk.add_listener(self._connection_changed)

    def __repr__(self) -> str:
        hosts = ",".join(f"{host}:{port}" for host, port in self.zk.hosts)
        return f"ZooKeeper {hosts}{self.zk.chroot or ''}"

    # -- watches ----------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` (from kazoo's thread: keep it short) after any watched change."""
        with self._lock:
            self._listeners.append(listener)

    def _connection_changed(self, state: str) -> None:
        # Watches may be lost with the session: nothing read before can be trusted to be current.
        if state != KazooState.CONNECTED:
            with self._lock:
                self.version += 1
                self._answers.clear()

    def _changed(self, event: WatchedEvent | None = None) -> None:
        with self._lock:
            self.version += 1
            self._answers.clear()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:
                log.exception("a ZooKeeper metadata listener failed")

    # -- reads --------------------------------------------------------------------------------------

    def _children(self, path: str) -> list[str]:
        try:
            return self._requests.get_children(path, watch=self._changed)
        except NoNodeError:
            self._requests.exists(path, watch=self._changed)
            return []

    def _data(self, path: str) -> bytes | None:
        try:
            return self._requests.get(path, watch=self._changed)[0]
        except NoNodeError:
            # Watch for the node's creation; if it appeared meanwhile, read it.
            if self._requests.exists(path, watch=self._changed) is None:
                return None
            try:
                return self._requests.get(path, watch=self._changed)[0]
            except NoNodeError:
                return None

    def brokers(self) -> dict[int, tuple[str, int]]:
        """Live broker id -> (host, port), from /brokers/ids."""
        brokers = {}
        for child in self._children(layout.BROKER_IDS):
            data = self._data(layout.broker_path(int(child)))
            if data is None:
                continue
            registration = layout.decode(data)
            brokers[int(child)] = (registration["host"], int(registration["port"]))
        return brokers

    def bootstrap_brokers(self) -> list[tuple[str, int]]:
        try:
            return list(self.brokers().values())
        except KazooException as exc:
            raise KafkaConnectionError(f"cannot read the brokers from ZooKeeper: {exc!r}") from exc

    def topic_names(self) -> list[str]:
        """Every topic of /brokers/topics, sorted."""
        return sorted(self._children(layout.BROKER_TOPICS))

    def partitions(self, topic: str) -> dict[int, list[int]] | None:
        """Partition -> replica ids of ``topic``, or None when it does not exist."""
        data = self._data(layout.topic_path(topic))
        return None if data is None else layout.parse_topic_assignment(data)

    def _partition_state(self, topic: str, partition: int) -> dict:
        return layout.decode(self._data(layout.partition_state_path(topic, partition)))

    def metadata(self, topics: Iterable[str] | None = None) -> dict:
        """What a Metadata response would say about ``topics`` (None: all topics), read from ZooKeeper.

        Answered again without reading ZooKeeper while no watch fired and the connection stayed up since it was
        read (callers must not change it). Raises KafkaConnectionError (retriable) when ZooKeeper cannot be read.
        """
        key = None if topics is None else tuple(sorted(set(topics)))
        version = self.version
        with self._lock:
            known = self._answers.get(key)
        if known is not None and known[0] == version:
            return known[1]
        try:
            answer = self._metadata(key)
        except KazooException as exc:
            raise KafkaConnectionError(f"cannot read the cluster metadata from ZooKeeper: {exc!r}") from exc
        with self._lock:
            # Kept only if nothing changed while it was read (a watch that fired meanwhile bumped the version).
            if self.version == version and self.zk.state == KazooState.CONNECTED:
                self._answers[key] = (version, answer)
        return answer

    def _metadata(self, topics: Iterable[str] | None) -> dict:
        brokers = self.brokers()
        names = self.topic_names() if topics is None else sorted(set(topics))
        described = []
        for name in names:
            replicas = self.partitions(name)
            if replicas is None:
                described.append({"name": name, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "partitions": []})
                continue
            partitions = []
            for partition, replica_ids in sorted(replicas.items()):
                state = self._partition_state(name, partition)
                leader = state.get("leader", -1)
                if leader not in brokers:
                    leader = -1
                partitions.append({
                    "partition_index": partition, "leader_id": leader,
                    "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                    "replica_nodes": list(replica_ids),
                    "isr_nodes": [b for b in state.get("isr", []) if b in brokers]})
            described.append({"name": name,
                              "error_code": ErrorCode.NONE if partitions else ErrorCode.LEADER_NOT_AVAILABLE,
                              "partitions": partitions})
        controller = layout.decode(self._data(layout.CONTROLLER)).get("brokerid", -1)
        cluster_id = layout.decode(self._data(layout.CLUSTER_ID)).get("id")
        return {"brokers": [{"node_id": b, "host": h, "port": p} for b, (h, p) in sorted(brokers.items())],
                "controller_id": controller, "cluster_id": cluster_id, "topics": described}

    def close(self) -> None:
        """Close the ZooKeeper client if this object opened it."""
        with self._lock:
            self._listeners.clear()
        self.zk.remove_listener(self._connection_changed)
        if self._owns_client:
            self.zk.stop()
            self.zk.close()
