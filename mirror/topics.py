"""Target topics made like their sources: created before the first record is sent to them.

A topic missing in the target is created with the largest partition count any source has for it (the
datacenters aggregate into one topic; see the README on partition mapping) and the topic settings of the
first source that has it (sources in name order), minus ``topic.config.exclude``. Several mirror processes
may race to create it; the loser finds it created. A target topic with fewer partitions than a source
partition needs is an error: our brokers cannot add partitions to a topic, and sending the record
elsewhere would break the per-partition order and the key -> partition mapping.
"""

from __future__ import annotations

import logging
import threading
from typing import Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pipeline.client.admin import AdminClient
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.zk import layout

__all__ = ["MirrorTopicError", "TopicSync"]

log = logging.getLogger(__name__)


class MirrorTopicError(Exception):
    """A target topic cannot hold what a source sends it."""


class TopicSync:
    """Ensures target topics exist with enough partitions; thread-safe, cached per topic."""

    def __init__(self, sources: Mapping[str, KazooClient], admin: AdminClient, exclude: tuple[str, ...] = ()) -> None:
        self._sources = dict(sorted(sources.items()))
        self._admin = admin
        self._exclude = frozenset(exclude)
        self._partitions: dict[str, int] = {}
        self._lock = threading.Lock()
        #: Topics this process created in the target (for logs and tests).
        self.created: list[str] = []

    def ensure(self, topic: str, partition: int) -> None:
        """Make sure the target topic exists and has ``partition``; MirrorTopicError if it cannot."""
        known = self._partitions.get(topic)
        if known is not None and partition < known:
            return
        with self._lock:
            known = self._target_partitions(topic)
            if known is None:
                self._create(topic)
                known = self._target_partitions(topic)
                if known is None:
                    raise MirrorTopicError(f"target topic {topic!r} is not visible after it was created")
            self._partitions[topic] = known
        if partition >= known:
            counts = self.source_partitions(topic)
            raise MirrorTopicError(
                f"target topic {topic!r} has {known} partitions, but source partition {partition} must go to "
                f"partition {partition} (source partition counts: {counts}); create the target topic with at "
                f"least {max(counts.values(), default=partition + 1)} partitions")

    def source_partitions(self, topic: str) -> dict[str, int]:
        """Partition count of ``topic`` in each source that has it."""
        counts = {}
        for name, zk in self._sources.items():
            try:
                counts[name] = len(layout.parse_topic_assignment(zk.get(layout.topic_path(topic))[0]))
            except NoNodeError:
                continue
        return counts

    def source_configs(self, topic: str) -> dict[str, str]:
        """The topic settings of the first source that has ``topic``, without the excluded ones."""
        for zk in self._sources.values():
            try:
                data = zk.get(layout.topic_config_path(topic))[0]
            except NoNodeError:
                if zk.exists(layout.topic_path(topic)) is not None:
                    return {}
                continue
            configs = layout.decode(data).get("config", {})
            return {k: str(v) for k, v in configs.items() if k not in self._exclude}
        return {}

    def _target_partitions(self, topic: str) -> int | None:
        try:
            description = self._admin.describe_topics([topic])[0]
        except KafkaProtocolError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return None
            raise
        return len(description.partitions)

    def _create(self, topic: str) -> None:
        counts = self.source_partitions(topic)
        if not counts:
            raise MirrorTopicError(f"topic {topic!r} is in no source cluster any more")
        configs = self.source_configs(topic)
        partitions = max(counts.values())
        try:
            self._admin.create_topics(topic, partitions=partitions, configs=configs)
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise MirrorTopicError(f"cannot create target topic {topic!r}: {exc}") from exc
            return
        self.created.append(topic)
        log.info("created target topic %s: %d partitions, settings %s", topic, partitions, configs)
