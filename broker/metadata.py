"""Cluster metadata: what a Metadata response is built from, and the standalone broker's own registry.

``MetadataView`` is the small interface the one Metadata response builder (``metadata_response``) reads:
live brokers, the controller, the cluster id and each topic's partitions with their leaders. A cluster
broker's ZkMetadataCache implements it from ZooKeeper; StandaloneMetadata implements it for a standalone
broker (no zookeeper.connect), a cluster of one node that leads every partition. What ZooKeeper would hold
for a cluster -- the topic registry, per-topic config overrides, the cluster id and the producer-id
allocator -- StandaloneMetadata keeps in one JSON file in the first log directory, written atomically
(temp file, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Mapping, Protocol

from pipeline.protocol.errors import ErrorCode

from pipeline.durable_file import write_atomically

METADATA_FILE = "__standalone_metadata.json"
# Producer ids are handed out from blocks; the end of the current block is persisted before any id of
# it is used, so ids are never reused across restarts (a reused id would collide with its old sequences).
PRODUCER_ID_BLOCK = 1000

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class InvalidTopicError(ValueError):
    """A topic name Kafka would not accept."""


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name."""
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} must be 1-249 characters of ASCII letters, digits, '.', '_' and '-'")


NO_LEADER = -1
# The leader epoch a Metadata response gives when it does not advertise one (clients then skip epoch checks).
NO_LEADER_EPOCH = -1
# Kafka's "not requested" value for authorized-operations fields.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@dataclass(frozen=True)
class BrokerEndpoint:
    """A live broker's id and advertised address: ``host``/``port`` the inter-broker listener's, ``listeners``
    every listener's (name, host, port) -- empty when only the one is known."""

    broker_id: int
    host: str
    port: int
    # Not compared: a broker is the same fetch source whatever its other listeners.
    listeners: tuple[tuple[str, str, int], ...] = field(default=(), compare=False)

    def on(self, listener_name: str | None) -> BrokerEndpoint | None:
        """This broker as a client of ``listener_name`` sees it (None: it has no such listener); the broker
        itself when no name is given or it knows only one address."""
        if listener_name is None or not self.listeners:
            return self
        for name, host, port in self.listeners:
            if name == listener_name:
                return BrokerEndpoint(self.broker_id, host, port, self.listeners)
        return None


@dataclass(frozen=True)
class PartitionView:
    """One partition as a Metadata response describes it; ``leader`` is NO_LEADER while it has none."""

    index: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


class MetadataView(Protocol):
    """What a broker knows of its cluster, as Metadata requests see it."""

    cluster_id: str
    controller_id: int

    def live_brokers(self) -> list[BrokerEndpoint]:
        """Every live broker, by id."""
        ...

    def topic_names(self) -> list[str]:
        """Every topic, sorted."""
        ...

    def describe_topic(self, name: str) -> list[PartitionView] | None:
        """The topic's partitions by index; None if the topic is unknown, [] while its layout is being read."""
        ...

    def topic_configs(self, name: str) -> dict[str, str] | None:
        """The topic's config overrides (Kafka topic config names); None if the topic is unknown."""
        ...


class ProducerIdUnavailable(Exception):
    """No producer id can be handed out now (the allocator's store is unavailable); clients retry."""


class ProducerIdManager(Protocol):
    """Hands out producer ids for InitProducerId (Kafka's ProducerIdManager)."""

    def next_producer_id(self) -> int | Awaitable[int]:
        """A new id, or an awaitable of one when a new block must be claimed first (it may raise
        ProducerIdUnavailable)."""
        ...


def metadata_response(view: MetadataView, names: list[str], topic_errors: Mapping[str, int],
                      listener_name: str | None = None) -> dict:
    """The body of a Metadata response for ``names``; ``topic_errors`` overrides the error of an unknown
    topic (e.g. LEADER_NOT_AVAILABLE while it is being created, INVALID_TOPIC_EXCEPTION). Brokers are given at
    their ``listener_name`` endpoint (the listener the request came in on), as Kafka does; those without one
    are left out."""
    entries = []
    for name in names:
        partitions = view.describe_topic(name)
        if not partitions:
            default = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if partitions is None else ErrorCode.LEADER_NOT_AVAILABLE
            entries.append({"error_code": topic_errors.get(name, default), "name": name, "partitions": [],
                            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        entries.append({"error_code": ErrorCode.NONE, "name": name, "is_internal": False, "partitions": [{
            "error_code": ErrorCode.NONE if p.leader != NO_LEADER else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": p.index,
            "leader_id": p.leader,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas),
            "isr_nodes": list(p.isr),
            "offline_replicas": list(p.offline_replicas),
        } for p in partitions], "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": None}
                    for b in (broker.on(listener_name) for broker in view.live_brokers()) if b is not None],
        "cluster_id": view.cluster_id,
        "controller_id": view.controller_id,
        "topics": entries,
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


@dataclass
class TopicInfo:
    """One topic: its partition count and config overrides (Kafka topic-level names)."""

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: str(uuid.uuid4()))


class StandaloneMetadata:
    """The topic registry and id allocators of a one-node cluster, persisted in the log dir; as a
    MetadataView, ``local`` is the only broker, the controller and the leader of every partition."""

    def __init__(self, log_dir: Path, local: BrokerEndpoint) -> None:
        self._path = Path(log_dir) / METADATA_FILE
        self.local = local
        self.controller_id = local.broker_id
        self.topics: dict[str, TopicInfo] = {}
        # Topics the file names but this broker cannot host (an illegal name, a log that cannot be opened):
        # kept in the file, never served.
        self.set_aside: dict[str, TopicInfo] = {}
        self.cluster_id = ""
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        self._load()

    def _load(self) -> None:
        if not self._path.exists():
            self.cluster_id = uuid.uuid4().hex[:22]
            self._save()
            return
        data = json.loads(self._path.read_text())
        self.cluster_id = data["cluster_id"]
        for name, info in data["topics"].items():
            topic = TopicInfo(name=name, **info)
            try:
                validate_topic_name(name)
            except InvalidTopicError as exc:
                log.error("not hosting topic %r named in %s: %s", name, self._path, exc)
                self.set_aside[name] = topic
                continue
            self.topics[name] = topic
        # Resume after the whole persisted block: ids of it may have been handed out before a crash.
        self._next_producer_id = data.get("producer_id_block_end", 0)
        self._producer_id_block_end = self._next_producer_id

    def _save(self) -> None:
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self._producer_id_block_end,
            "topics": {
                t.name: {"partitions": t.partitions, "configs": t.configs, "topic_id": t.topic_id}
                for t in [*self.set_aside.values(), *self.topics.values()]
            },
        }
        write_atomically(self._path, json.dumps(data, indent=1, sort_keys=True).encode())

    # -- MetadataView -----------------------------------------------------------------------------

    def live_brokers(self) -> list[BrokerEndpoint]:
        return [self.local]

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def describe_topic(self, name: str) -> list[PartitionView] | None:
        info = self.topics.get(name)
        if info is None:
            return None
        me = (self.local.broker_id,)
        return [PartitionView(index, self.local.broker_id, NO_LEADER_EPOCH, me, me) for index in range(info.partitions)]

    def topic_configs(self, name: str) -> dict[str, str] | None:
        info = self.topics.get(name)
        return None if info is None else dict(info.configs)

    # -- the registry -----------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics or name in self.set_aside:
            raise FileExistsError(f"topic {name!r} already exists")
        if partitions < 1:
            raise ValueError(f"a topic needs at least one partition, got {partitions}")
        info = TopicInfo(name=name, partitions=partitions, configs=dict(configs or {}))
        self.topics[name] = info
        self._save()
        return info

    def add_partitions(self, name: str, count: int) -> TopicInfo:
        """Grow a registered topic to ``count`` partitions (existing ones keep their numbers)."""
        info = self.topics[name]
        if count <= info.partitions:
            raise ValueError(f"topic {name!r} has {info.partitions} partitions, not fewer than {count}")
        info.partitions = count
        self._save()
        return info

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a registered topic's config overrides."""
        self.topics[name].configs = dict(configs)
        self._save()

    def delete_topic(self, name: str) -> None:
        if self.topics.pop(name, None) is None:
            raise KeyError(name)
        self._save()

    def set_topic_aside(self, name: str, reason: str) -> None:
        """Stop serving a registered topic this broker cannot host; the file keeps naming it."""
        info = self.topics.pop(name, None)
        if info is not None:
            log.error("not hosting topic %r named in %s: %s", name, self._path, reason)
            self.set_aside[name] = info

    def adopt_topic(self, name: str, partitions: int) -> None:
        """Register a topic found on disk but missing from the registry (e.g. a copied log dir)."""
        if name not in self.topics:
            self.topics[name] = TopicInfo(name=name, partitions=partitions)
            self._save()

    def next_producer_id(self) -> int:
        if self._next_producer_id >= self._producer_id_block_end:
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            self._save()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid
