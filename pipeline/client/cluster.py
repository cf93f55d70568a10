"""Cluster: what a client knows of the brokers, topics and partition leaders, and its connections to them.

Brokers are found through a :class:`BrokerDiscovery` -- a static list (metadata.broker.list) or
ZooKeeper, behind the same interface -- and the topic layout through Metadata requests, refreshed
on demand (an unknown topic, a NOT_LEADER error) or when older than a configured age. A discovery that
is also a :class:`MetadataSource` (ZooKeeper) answers for the brokers instead, and its ``version``
tells when what it knows changed; only topics it does not know and the caller wants created are then
asked of a broker (whose Metadata request creates them); when the discovery cannot answer (ZooKeeper slow
or gone) a broker's Metadata answers instead. Connections are pooled per broker id.

Callers are never held up by a refresh of what is already known: a known topic whose metadata is merely
old (by age or by the discovery's version) is answered from the cache while one background thread
refreshes it. Only an unknown topic or one marked failed (``invalidate`` after an error) is refreshed on
the caller's thread, and that refresh holds no lock other callers need. Thread-safe: a producer's sender
thread and its callers may share one Cluster.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import KafkaClientError, KafkaConnectionError, NoBrokersAvailable, UnknownTopicError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity

log = logging.getLogger(__name__)

# Least pause between background refreshes that left the metadata stale (the discovery failed or
# changed again meanwhile), so a ZooKeeper outage does not turn every send into a refresh attempt.
_BACKGROUND_REFRESH_BACKOFF_S = 0.2


class BrokerDiscovery(Protocol):
    """Where a client finds brokers to bootstrap from."""

    def bootstrap_brokers(self) -> list[tuple[str, int]]:
        """Addresses (host, port) of brokers to ask for metadata, in the order to try them."""
        ...


class MetadataSource(BrokerDiscovery, Protocol):
    """A discovery that knows the topic layout itself (ZooKeeper) and says when it changed."""

    version: int

    def metadata(self, topics: Iterable[str] | None = None) -> dict:
        """A Metadata response's brokers, controller_id, cluster_id and topics for ``topics`` (None: all)."""
        ...


def parse_broker_list(text: str) -> list[tuple[str, int]]:
    """Parse ``host:port[,host:port...]`` (a ``broker_id:host:port`` entry of the paper era also works)."""
    brokers = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()):
            raise ValueError(f"broker address {entry!r} is not host:port")
        broker_id = host.split(":")[0]
        host = host.split(":")[-1] if host.count(":") == 1 and broker_id.isascii() and broker_id.isdigit() else host
        brokers.append((host.strip("[]"), int(port)))
    if not brokers:
        raise ValueError("no broker address given")
    return brokers


class StaticBrokerList:
    """Bootstrap brokers from a fixed list (metadata.broker.list / bootstrap.servers)."""

    def __init__(self, brokers: str | Iterable[tuple[str, int]]) -> None:
        self._brokers = parse_broker_list(brokers) if isinstance(brokers, str) else list(brokers)

    def bootstrap_brokers(self) -> list[tuple[str, int]]:
        shuffled = list(self._brokers)
        random.shuffle(shuffled)
        return shuffled


@dataclass
class PartitionInfo:
    """One partition as the last Metadata response described it."""

    partition: int
    leader: int
    error_code: int = ErrorCode.NONE
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)


@dataclass
class TopicInfo:
    """One topic as the last Metadata response described it."""

    name: str
    error_code: int
    partitions: dict[int, PartitionInfo]


class Cluster:
    """Broker addresses, topic layouts and pooled connections for one client."""

    def __init__(self, discovery: BrokerDiscovery, *, client_id: str = "pipeline", timeout_s: float = 30.0,
                 metadata_max_age_s: float = 300.0, security: ClientSecurity = PLAINTEXT_SECURITY) -> None:
        self.discovery = discovery
        self.security = security
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.metadata_max_age_s = metadata_max_age_s
        # Guards what is known (brokers, topics, the pool); never held while waiting for the network.
        self._lock = threading.RLock()
        # One refresh at a time, in order; guards the metadata connection.
        self._refresh_lock = threading.Lock()
        self._refresher: threading.Thread | None = None
        self._refresh_not_before = 0.0
        self._closed = False
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, TopicInfo] = {}
        # Connections to send data on belong to one thread (a producer's sender, a consumer); metadata
        # requests, which any thread may trigger, use their own connection under the refresh lock.
        self._connections: dict[int, BrokerConnection] = {}
        self._metadata_connection: BrokerConnection | None = None
        self._refreshed_at = 0.0
        self._source: MetadataSource | None = (
            discovery if hasattr(discovery, "metadata") else None)  # type: ignore[assignment]
        self._source_version = -1
        self.controller_id = -1
        self.cluster_id: str | None = None

    # -- metadata --------------------------------------------------------------------------------

    def refresh(self, topics: Iterable[str] | None = None, *, allow_auto_create: bool = False) -> None:
        """Ask any broker for metadata of ``topics`` (None: all topics) and update what we know."""
        names = None if topics is None else sorted(set(topics))
        body = {"topics": None if names is None else [{"name": n} for n in names],
                "allow_auto_topic_creation": allow_auto_create,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
        errors: list[str] = []
        with self._refresh_lock:
            if self._source is not None:
                version = self._source.version
                with self._lock:
                    known = set(self._topics)
                try:
                    # Everything known is re-read: the version says something changed, not what.
                    response = self._source.metadata(None if names is None else sorted(set(names) | known))
                except KafkaConnectionError as exc:
                    # The brokers' own metadata still answers while ZooKeeper is slow or gone.
                    errors.append(str(exc))
                else:
                    unknown = [t for t in response["topics"]
                               if t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
                    if not (allow_auto_create and unknown):
                        self._update(response, full=names is None, source_version=version)
                        return
            for attempt in range(2):
                connection = self._metadata_connection
                if connection is None:
                    connection = self._connect_any(errors)
                try:
                    response = connection.request(ApiKey.METADATA, body)
                except KafkaConnectionError as exc:
                    errors.append(str(exc))
                    connection.close()
                    self._metadata_connection = None
                    continue
                self._metadata_connection = connection
                self._update(response, full=names is None)
                return
        raise NoBrokersAvailable("no broker answered a metadata request: " + "; ".join(errors))

    def _connect_any(self, errors: list[str]) -> BrokerConnection:
        """A new connection to a known broker or, failing that, a bootstrap broker."""
        with self._lock:
            known = list(self._brokers.values())
        random.shuffle(known)
        for host, port in known + self._bootstrap_brokers(errors):
            connection = BrokerConnection(host, port, client_id=self.client_id, timeout_s=self.timeout_s,
                                          security=self.security)
            try:
                connection.connect()
            except KafkaConnectionError as exc:
                errors.append(str(exc))
                continue
            return connection
        raise NoBrokersAvailable("no broker can be reached: " + "; ".join(errors))

    def _bootstrap_brokers(self, errors: list[str]) -> list[tuple[str, int]]:
        try:
            return self.discovery.bootstrap_brokers()
        except KafkaConnectionError as exc:
            errors.append(str(exc))
            return []

    def _update(self, response: dict, full: bool, source_version: int | None = None) -> None:
        with self._lock:
            if source_version is not None:
                self._source_version = source_version
            self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
            for node_id in list(self._connections):
                connection = self._connections[node_id]
                if self._brokers.get(node_id) != (connection.host, connection.port):
                    connection.close()
                    del self._connections[node_id]
            self.controller_id = response.get("controller_id", -1)
            self.cluster_id = response.get("cluster_id")
            if full:
                self._topics = {}
            for topic in response["topics"]:
                partitions = {
                    p["partition_index"]: PartitionInfo(p["partition_index"], p["leader_id"], p["error_code"],
                                                        list(p["replica_nodes"]), list(p["isr_nodes"]))
                    for p in topic["partitions"]
                }
                if topic["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self._topics.pop(topic["name"], None)
                else:
                    self._topics[topic["name"]] = TopicInfo(topic["name"], topic["error_code"], partitions)
            self._refreshed_at = time.monotonic()

    def topic(self, name: str, *, refresh: bool = True, allow_auto_create: bool = False) -> TopicInfo:
        """What we know of ``name``: asked of the cluster on this thread when unknown or marked failed;
        merely old metadata is answered from the cache while it is refreshed in the background."""
        with self._lock:
            info = self._topics.get(name)
        if refresh:
            if info is None or info.error_code:
                self.refresh([name], allow_auto_create=allow_auto_create)
                with self._lock:
                    info = self._topics.get(name)
            elif self._stale():
                self._refresh_soon()
        if info is None:
            raise UnknownTopicError(name)
        if info.error_code and not info.partitions:
            raise KafkaProtocolError(info.error_code, f"topic {name!r} is not available")
        return info

    def partitions_for(self, topic: str, *, allow_auto_create: bool = False) -> list[int]:
        """The partition ids of ``topic`` in order."""
        return sorted(self.topic(topic, allow_auto_create=allow_auto_create).partitions)

    def leader(self, topic: str, partition: int) -> int:
        """The broker id leading ``topic``-``partition``, or -1 when it has no leader right now."""
        part = self.topic(topic).partitions.get(partition)
        if part is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {partition}")
        return part.leader

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic of the cluster (always asks the cluster)."""
        self.refresh(None)
        with self._lock:
            return dict(self._topics)

    def brokers(self) -> dict[int, tuple[str, int]]:
        """Broker id -> (host, port), asking the cluster when nothing is known yet."""
        with self._lock:
            known = dict(self._brokers)
        if not known:
            self.refresh([])
            with self._lock:
                known = dict(self._brokers)
        return known

    def _stale(self) -> bool:
        """Whether what is known is older than the metadata age or than the discovery's last change."""
        return time.monotonic() - self._refreshed_at > self.metadata_max_age_s or (
            self._source is not None and self._source.version != self._source_version)

    def _refresh_soon(self) -> None:
        """Refresh everything known on a background thread (one at a time); callers go on with the cache."""
        with self._lock:
            if self._refresher is not None or self._closed or time.monotonic() < self._refresh_not_before:
                return
            thread = self._refresher = threading.Thread(target=self._refresh_in_background, daemon=True,
                                                        name=f"metadata-refresh-{self.client_id}")
        thread.start()

    def _refresh_in_background(self) -> None:
        try:
            with self._lock:
                known = list(self._topics)
            self.refresh(known)
        except (KafkaClientError, KafkaProtocolError) as exc:
            log.info("background metadata refresh failed; the cached metadata stays in use: %s", exc)
        finally:
            with self._lock:
                self._refresher = None
                if self._stale():
                    self._refresh_not_before = time.monotonic() + _BACKGROUND_REFRESH_BACKOFF_S

    # -- connections ---------------------------------------------------------------------------

    def connection(self, node_id: int) -> BrokerConnection:
        """The pooled, connected connection to broker ``node_id``."""
        with self._lock:
            connection = self._connections.get(node_id)
            if connection is None:
                address = self._brokers.get(node_id)
                if address is None:
                    raise KafkaConnectionError(f"broker {node_id} is not known to the cluster metadata")
                connection = BrokerConnection(address[0], address[1], client_id=self.client_id,
                                              timeout_s=self.timeout_s, node_id=node_id, security=self.security)
                self._connections[node_id] = connection
        connection.connect()
        return connection

    def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        """A connection to the leader of ``topic``-``partition``, refreshing metadata if it has none."""
        node_id = self.leader(topic, partition)
        if node_id < 0:
            self.refresh([topic])
            node_id = self.leader(topic, partition)
            if node_id < 0:
                raise KafkaProtocolError(ErrorCode.LEADER_NOT_AVAILABLE,
                                         f"{topic}-{partition} has no leader right now")
        return self.connection(node_id)

    def any_connection(self) -> BrokerConnection:
        """A connection to some live broker (for admin requests any broker can answer)."""
        for node_id in list(self.brokers()):
            try:
                return self.connection(node_id)
            except KafkaConnectionError:
                continue
        raise NoBrokersAvailable("no broker of the cluster can be reached")

    def invalidate(self, node_id: int | None = None) -> None:
        """Forget metadata (and one broker's connection) after an error, so the next use refreshes."""
        with self._lock:
            self._refreshed_at = 0.0
            self._topics = {name: TopicInfo(t.name, ErrorCode.LEADER_NOT_AVAILABLE, t.partitions)
                            for name, t in self._topics.items()}
            if node_id is not None:
                connection = self._connections.pop(node_id, None)
                if connection is not None:
                    connection.close()

    def close(self) -> None:
        """Close every connection; no background refresh starts afterwards."""
        with self._lock:
            self._closed = True
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()
        # A refresh in progress owns the metadata connection: it is closed when that refresh ends.
        if self._refresh_lock.acquire(timeout=self.timeout_s):
            try:
                if self._metadata_connection is not None:
                    self._metadata_connection.close()
                    self._metadata_connection = None
            finally:
                self._refresh_lock.release()
