"""AdminManager: creates and deletes topics and maps topic-level configs onto the storage settings.

Topic-level config overrides use Kafka's topic config names (retention.ms, segment.bytes, ...); the
table ``TOPIC_CONFIGS`` says which LogConfig field each one sets, so a new override is one row.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, NamedTuple

from broker.log.log_config import MIN_INDEX_BYTES, MIN_SEGMENT_BYTES, LogConfig
from broker.metadata import InvalidTopicError, StandaloneMetadata, TopicInfo, validate_topic_name
from broker.replica_manager import ReplicaManager
from pipeline.config import INT32_MAX, INT64_MAX, ConfigError, check_range
from pipeline.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def _unlimited_if_negative(value: int) -> int | None:
    return None if value < 0 else value


def _same(value: int) -> int:
    return value


class TopicConfig(NamedTuple):
    """How one Kafka topic config sets a LogConfig field, and the range Kafka accepts for it."""

    field: str
    at_least: int | None
    at_most: int
    convert: Callable[[int], object] = _same


# Kafka topic config name -> its LogConfig field and bounds (Kafka's LogConfig: INT at most 2^31-1, LONG 2^63-1)
TOPIC_CONFIGS: dict[str, TopicConfig] = {
    "retention.ms": TopicConfig("retention_ms", -1, INT64_MAX, _unlimited_if_negative),
    "retention.bytes": TopicConfig("retention_bytes", None, INT64_MAX, _unlimited_if_negative),
    "segment.bytes": TopicConfig("segment_bytes", MIN_SEGMENT_BYTES, INT32_MAX),
    "segment.ms": TopicConfig("segment_ms", 1, INT64_MAX),
    "segment.index.bytes": TopicConfig("max_index_size", MIN_INDEX_BYTES, INT32_MAX),
    "index.interval.bytes": TopicConfig("index_interval_bytes", 0, INT32_MAX),
    "flush.messages": TopicConfig("flush_interval_messages", 1, INT64_MAX),
    "flush.ms": TopicConfig("flush_interval_ms", 0, INT64_MAX),
    "max.message.bytes": TopicConfig("max_message_bytes", 0, INT32_MAX),
    "file.delete.delay.ms": TopicConfig("file_delete_delay_ms", 0, INT64_MAX),
}


class TopicError(Exception):
    """A topic operation refused with a Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def topic_log_config(default: LogConfig, configs: dict[str, str]) -> LogConfig:
    """The default LogConfig with a topic's overrides applied; TopicError(INVALID_CONFIG) if one is bad."""
    changes: dict[str, object] = {}
    for name, text in configs.items():
        entry = TOPIC_CONFIGS.get(name)
        if entry is None:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"unknown or unsupported topic config {name!r}")
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise TopicError(ErrorCode.INVALID_CONFIG, f"topic config {name}={text!r} is not a number") from None
        try:
            check_range("topic config", name, value, entry.at_least, entry.at_most)
        except ConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        changes[entry.field] = entry.convert(value)
    return dataclasses.replace(default, **changes)


class AdminManager:
    """Topic creation and deletion on a standalone broker: the registry first, then the logs."""

    def __init__(self, metadata: StandaloneMetadata, replica_manager: ReplicaManager, default_log_config: LogConfig,
                 default_partitions: int, broker_count: int = 1) -> None:
        self._metadata = metadata
        self._replica_manager = replica_manager
        self._default_log_config = default_log_config
        self._default_partitions = default_partitions
        self._broker_count = broker_count

    def host_existing_topics(self) -> None:
        """At start-up: lead every partition of every registered topic, adopting logs found on disk."""
        on_disk = self._replica_manager.partitions_on_disk()
        for topic in sorted({t for t, _ in on_disk} - set(self._metadata.topics)):
            count = 1 + max(p for t, p in on_disk if t == topic)
            log.warning("adopting topic %s with %d partition(s) found on disk but not in the registry", topic, count)
            self._metadata.adopt_topic(topic, count)
        for info in self._metadata.topics.values():
            self._host(info)

    def _host(self, info: TopicInfo) -> None:
        config = topic_log_config(self._default_log_config, info.configs)
        for index in range(info.partitions):
            self._replica_manager.make_leader(info.name, index, config)

    def topics(self) -> dict[str, TopicInfo]:
        return self._metadata.topics

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, validate_only: bool = False) -> TopicInfo | None:
        """Create a topic; -1 partitions or replication factor take the broker defaults."""
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
        if name in self._metadata.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = self._default_partitions
        if partitions < 1:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {partitions}")
        if replication_factor == -1:
            replication_factor = 1
        if not 1 <= replication_factor <= self._broker_count:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication factor {replication_factor} is larger than the {self._broker_count} "
                             f"available broker(s)" if replication_factor > 0 else
                             f"replication factor must be at least 1, got {replication_factor}")
        configs = dict(configs or {})
        topic_log_config(self._default_log_config, configs)
        if validate_only:
            return None
        info = self._metadata.create_topic(name, partitions, configs)
        self._host(info)
        log.info("created topic %s with %d partition(s)%s", name, partitions, f" and configs {configs}" if configs else "")
        return info

    def delete_topic(self, name: str) -> None:
        info = self._metadata.topics.get(name)
        if info is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        self._metadata.delete_topic(name)
        for index in range(info.partitions):
            self._replica_manager.stop_partition(name, index, delete=True)
        log.info("deleted topic %s", name)
