"""Cluster metadata for a standalone broker: topics, their partition counts and configs, kept in the log dir.

A standalone broker (no zookeeper.connect) is a cluster of one node. What ZooKeeper would hold for a
cluster -- the topic registry, per-topic config overrides, the cluster id and the producer-id allocator
-- is kept in one JSON file in the first log directory, written atomically and durably.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.durable_file import write_atomically

METADATA_FILE = "__standalone_metadata.json"
# Producer ids are handed out from blocks; the end of the current block is persisted before any id of
# it is used, so ids are never reused across restarts (a reused id would collide with its old sequences).
PRODUCER_ID_BLOCK = 1000

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class InvalidTopicError(ValueError):
    """A topic name Kafka would not accept."""


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name."""
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} must be 1-249 characters of ASCII letters, digits, '.', '_' and '-'")


@dataclass
class TopicInfo:
    """One topic: its partition count and config overrides (Kafka topic-level names)."""

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: str(uuid.uuid4()))


class StandaloneMetadata:
    """The topic registry and id allocators of a one-node cluster, persisted in the log dir."""

    def __init__(self, log_dir: Path) -> None:
        self._path = Path(log_dir) / METADATA_FILE
        self.topics: dict[str, TopicInfo] = {}
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
        self.topics = {name: TopicInfo(name=name, **info) for name, info in data["topics"].items()}
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
                for t in self.topics.values()
            },
        }
        write_atomically(self._path, json.dumps(data, indent=1, sort_keys=True).encode())

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics:
            raise FileExistsError(f"topic {name!r} already exists")
        if partitions < 1:
            raise ValueError(f"a topic needs at least one partition, got {partitions}")
        info = TopicInfo(name=name, partitions=partitions, configs=dict(configs or {}))
        self.topics[name] = info
        self._save()
        return info

    def delete_topic(self, name: str) -> None:
        if self.topics.pop(name, None) is None:
            raise KeyError(name)
        self._save()

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
