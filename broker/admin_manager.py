"""AdminManager: creates and deletes topics, adds partitions to them, and maps topic-level configs onto the storage settings.

Topic-level config overrides use Kafka's topic config names (retention.ms, segment.bytes, ...); the
table ``TOPIC_CONFIGS`` says which LogConfig field each one sets, so a new override is one row.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from typing import Any, Callable, NamedTuple, Protocol

from broker.log.log_config import MIN_INDEX_BYTES, MIN_SEGMENT_BYTES, LogConfig, parse_cleanup_policy
from broker.metadata import InvalidTopicError, StandaloneMetadata, TopicInfo, validate_topic_name
from broker.replica_manager import ReplicaManager
from pipeline.config import INT32_MAX, INT64_MAX, ConfigError, check_range
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import CONFIG_TYPE_DOUBLE, CONFIG_TYPE_INT, CONFIG_TYPE_LIST, CONFIG_TYPE_LONG

log = logging.getLogger(__name__)


def _unlimited_if_negative(value: int) -> int | None:
    return None if value < 0 else value


def _same(value: object) -> object:
    return value


class TopicConfig(NamedTuple):
    """How one Kafka topic config sets a LogConfig field: the text's type, the range Kafka accepts for it, and
    the conversion to the field's value."""

    field: str
    at_least: float | None
    at_most: float
    convert: Callable[[Any], object] = _same
    config_type: int = CONFIG_TYPE_INT

    def parse(self, name: str, text: str) -> object:
        """The LogConfig value of ``text``; TopicError(INVALID_CONFIG) when Kafka would refuse it."""
        try:
            if self.config_type == CONFIG_TYPE_LIST:
                return self.convert(parse_cleanup_policy(text))
            value: float = float(text) if self.config_type == CONFIG_TYPE_DOUBLE else int(text)
        except (TypeError, ValueError) as exc:
            reason = str(exc) if self.config_type == CONFIG_TYPE_LIST else "is not a number"
            raise TopicError(ErrorCode.INVALID_CONFIG, f"topic config {name}={text!r} {reason}") from None
        try:
            check_range("topic config", name, value, self.at_least, self.at_most)
        except ConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return self.convert(value)

    def render(self, value: object) -> str:
        """The field's value as DescribeConfigs gives it (unlimited: -1 where Kafka accepts it, else the maximum)."""
        if value is None:
            return str(-1 if self.at_least is None or self.at_least < 0 else self.at_most)
        if isinstance(value, frozenset):
            return ",".join(sorted(value))
        return str(value)


def _number(field: str, at_least: int | None, at_most: int, convert: Callable[[Any], object] = _same) -> TopicConfig:
    return TopicConfig(field, at_least, at_most, convert, CONFIG_TYPE_LONG if at_most > INT32_MAX else CONFIG_TYPE_INT)


# Kafka topic config name -> its LogConfig field and bounds (Kafka's LogConfig: INT at most 2^31-1, LONG 2^63-1)
TOPIC_CONFIGS: dict[str, TopicConfig] = {
    "retention.ms": _number("retention_ms", -1, INT64_MAX, _unlimited_if_negative),
    "retention.bytes": _number("retention_bytes", None, INT64_MAX, _unlimited_if_negative),
    "segment.bytes": _number("segment_bytes", MIN_SEGMENT_BYTES, INT32_MAX),
    "segment.ms": _number("segment_ms", 1, INT64_MAX),
    "segment.index.bytes": _number("max_index_size", MIN_INDEX_BYTES, INT32_MAX),
    "index.interval.bytes": _number("index_interval_bytes", 0, INT32_MAX),
    "flush.messages": _number("flush_interval_messages", 1, INT64_MAX),
    "flush.ms": _number("flush_interval_ms", 0, INT64_MAX),
    "max.message.bytes": _number("max_message_bytes", 0, INT32_MAX),
    "file.delete.delay.ms": _number("file_delete_delay_ms", 0, INT64_MAX),
    "min.insync.replicas": _number("min_insync_replicas", 1, INT32_MAX),
    "cleanup.policy": TopicConfig("cleanup_policy", None, 0, config_type=CONFIG_TYPE_LIST),
    "min.cleanable.dirty.ratio": TopicConfig("min_cleanable_dirty_ratio", 0.0, 1.0, config_type=CONFIG_TYPE_DOUBLE),
    "min.compaction.lag.ms": _number("min_compaction_lag_ms", 0, INT64_MAX),
    "max.compaction.lag.ms": _number("max_compaction_lag_ms", 1, INT64_MAX),
    "delete.retention.ms": _number("delete_retention_ms", 0, INT64_MAX),
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
        changes[entry.field] = entry.parse(name, text)
    return dataclasses.replace(default, **changes)


def valid_overrides(default: LogConfig, topic: str, configs: dict[str, str]) -> dict[str, str]:
    """A stored topic's overrides that are still valid (bounds may have tightened since it was created); each
    invalid one is logged and left out, so a stored value never keeps a broker from starting or a partition
    from being led."""
    valid = {}
    for name, text in configs.items():
        try:
            topic_log_config(default, {name: text})
        except TopicError as exc:
            log.warning("topic %s: ignoring its config %s=%r (%s)", topic, name, text, exc)
            continue
        valid[name] = text
    return valid


def stored_topic_log_config(default: LogConfig, topic: str, configs: dict[str, str]) -> LogConfig:
    """The LogConfig of a topic that already exists: the default with its valid overrides applied."""
    return topic_log_config(default, valid_overrides(default, topic, configs))


class ConfigEntry(NamedTuple):
    """One topic config as DescribeConfigs reports it: its effective value, whether the topic overrides it, and
    its Kafka config type (DescribeConfigs' ConfigType)."""

    name: str
    value: str
    overridden: bool
    config_type: int


def describe_topic_configs(default: LogConfig, topic: str, overrides: dict[str, str],
                           names: list[str] | None = None) -> list[ConfigEntry]:
    """Every topic config of ``TOPIC_CONFIGS`` (or those of ``names`` it has) with the value in effect for
    ``topic`` whose stored overrides are ``overrides``: the override when it is valid, else the broker's default."""
    in_effect = valid_overrides(default, topic, overrides)
    effective = topic_log_config(default, in_effect)
    entries = []
    for name in sorted(TOPIC_CONFIGS) if names is None else names:
        entry = TOPIC_CONFIGS.get(name)
        if entry is None:
            continue
        entries.append(ConfigEntry(name, entry.render(getattr(effective, entry.field)), name in in_effect,
                                   entry.config_type))
    return entries


class TopicAdmin(Protocol):
    """Topic creation and deletion as the request handlers use them, standalone or in a cluster."""

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, validate_only: bool = False,
                           timeout_ms: int = 30000) -> None:
        """Create a topic (-1 counts take the defaults); TopicError with Kafka's code when refused."""
        ...

    async def delete_topic(self, name: str, timeout_ms: int = 30000) -> None:
        """Delete a topic; TopicError with Kafka's code when refused."""
        ...

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False, timeout_ms: int = 30000) -> None:
        """Grow a topic to ``count`` partitions (Kafka's CreatePartitions); ``assignments`` holds the
        replica list of each new partition, None to let the broker choose. TopicError when refused."""
        ...

    async def alter_topic_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                                  validate_only: bool = False) -> None:
        """Replace a topic's config overrides by ``change(current overrides)`` (which raises TopicError to
        refuse), and apply them to its logs; TopicError(UNKNOWN_TOPIC_OR_PARTITION) for an unknown topic."""
        ...

    @property
    def default_log_config(self) -> LogConfig:
        """The storage settings of a topic that overrides none (the broker's log.* settings)."""
        ...

    def auto_create(self, name: str) -> None:
        """Create ``name`` with the defaults for a Metadata request, or start creating it;
        TopicError(INVALID_TOPIC_EXCEPTION) at once for an illegal name."""
        ...


@dataclasses.dataclass(frozen=True)
class NewTopic:
    """A creation request that passed validation, with the broker defaults filled in."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


def validate_name(name: str) -> None:
    """TopicError(INVALID_TOPIC_EXCEPTION) unless ``name`` is a legal Kafka topic name."""
    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None


def validate_new_topic(name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None,
                       default_log_config: LogConfig, default_partitions: int, default_replication_factor: int,
                       available_brokers: int) -> NewTopic:
    """Check a creation request as Kafka does (name, counts, configs); -1 counts take the defaults.

    Standalone and cluster mode both validate with this; TopicError with Kafka's code when refused.
    """
    validate_name(name)
    if partitions == -1:
        partitions = default_partitions
    if partitions < 1:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {partitions}")
    if replication_factor == -1:
        replication_factor = default_replication_factor
    if replication_factor < 1:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > available_brokers:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"replication factor {replication_factor} is larger than the {available_brokers} "
                         f"available broker(s)")
    configs = dict(configs or {})
    topic_log_config(default_log_config, configs)
    return NewTopic(name, partitions, replication_factor, configs)


def validate_new_partitions(name: str, current: dict[int, list[int]] | None, count: int,
                            assignments: list[list[int]] | None, live_brokers: set[int]) -> None:
    """Check a CreatePartitions entry as Kafka does: the topic exists, ``count`` is more than its partitions
    (``current``: partition -> replicas), and any manual assignment names one replica list per new
    partition, of the topic's replication factor, without repeats, over live brokers.

    Standalone and cluster mode both validate with this; TopicError with Kafka's code when refused.
    """
    if current is None:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    if count == len(current):
        raise TopicError(ErrorCode.INVALID_PARTITIONS, f"topic {name!r} already has {count} partitions")
    if count < len(current):
        raise TopicError(ErrorCode.INVALID_PARTITIONS,
                         f"topic {name!r} currently has {len(current)} partitions, which is higher than the "
                         f"requested {count}")
    if assignments is None:
        return
    added = count - len(current)
    if len(assignments) != added:
        raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"increasing the number of partitions by {added} but {len(assignments)} assignments "
                         f"provided")
    factor = len(next(iter(current.values()), ()))
    for offset, replicas in enumerate(assignments):
        index = len(current) + offset
        if not replicas:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {index} has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"duplicate brokers {replicas} in the replica assignment of partition {index}")
        if factor and len(replicas) != factor:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"inconsistent replication factor between partitions: partition 0 has {factor} "
                             f"replicas, partition {index} has {len(replicas)}")
        unknown = sorted(set(replicas) - live_brokers)
        if unknown:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"unknown broker(s) in the replica assignment of partition {index}: {unknown}")


# Descriptors a hosted partition keeps open at least: its active segment's log and two index files.
FILES_PER_PARTITION = 3


def max_hosted_partitions() -> int:
    """How many partitions this process can host: half its open-files limit (the other half is for
    connections and older segments) over FILES_PER_PARTITION. A request beyond it is refused instead of
    leaving the broker unable to open files, or busy creating millions of logs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return INT32_MAX
    return max(1, soft // 2 // FILES_PER_PARTITION)


class AdminManager:
    """Topic creation and deletion on a standalone broker: the registry first, then the logs."""

    def __init__(self, metadata: StandaloneMetadata, replica_manager: ReplicaManager, default_log_config: LogConfig,
                 default_partitions: int, broker_count: int = 1) -> None:
        self._metadata = metadata
        self._replica_manager = replica_manager
        self._default_log_config = default_log_config
        self._default_partitions = default_partitions
        self._broker_count = broker_count

    @property
    def default_log_config(self) -> LogConfig:
        return self._default_log_config

    def host_existing_topics(self) -> None:
        """At start-up: lead every partition of every registered topic, adopting logs found on disk."""
        on_disk = self._replica_manager.partitions_on_disk()
        for topic in sorted({t for t, _ in on_disk} - set(self._metadata.topics) - set(self._metadata.set_aside)):
            try:
                validate_topic_name(topic)
            except InvalidTopicError as exc:
                log.error("not adopting the logs of topic %r found on disk: %s", topic, exc)
                continue
            count = 1 + max(p for t, p in on_disk if t == topic)
            log.warning("adopting topic %s with %d partition(s) found on disk but not in the registry", topic, count)
            self._metadata.adopt_topic(topic, count)
        for info in list(self._metadata.topics.values()):
            try:
                self._host(info)
            except Exception as exc:  # one topic's log that cannot be opened must not stop the broker
                self._metadata.set_topic_aside(info.name, f"{type(exc).__name__}: {exc}")

    def _host(self, info: TopicInfo, first: int = 0) -> None:
        """Lead partitions ``first``.. of the topic."""
        config = stored_topic_log_config(self._default_log_config, info.name, info.configs)
        for index in range(first, info.partitions):
            self._replica_manager.make_leader(info.name, index, config)

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, validate_only: bool = False,
                           timeout_ms: int = 30000) -> None:
        """Create a topic at once; -1 partitions or replication factor take the broker defaults."""
        self._create(name, partitions, replication_factor, configs, validate_only)

    def auto_create(self, name: str) -> None:
        self._create(name, -1, -1, None, False)

    def _create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None,
                validate_only: bool) -> None:
        topic = validate_new_topic(name, partitions, replication_factor, configs, self._default_log_config,
                                   self._default_partitions, 1, self._broker_count)
        if name in self._metadata.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        self._check_capacity(topic.partitions)
        if validate_only:
            return
        info = self._metadata.create_topic(name, topic.partitions, topic.configs)
        self._host(info)
        log.info("created topic %s with %d partition(s)%s", name, topic.partitions,
                 f" and configs {topic.configs}" if topic.configs else "")

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False, timeout_ms: int = 30000) -> None:
        """Grow a topic to ``count`` partitions at once: the registry first, then the new logs."""
        info = self._metadata.topics.get(name)
        me = self._metadata.local.broker_id
        current = None if info is None else {index: [me] for index in range(info.partitions)}
        validate_new_partitions(name, current, count, assignments, {me})
        if info is None:
            return
        self._check_capacity(count - info.partitions)
        if validate_only:
            return
        before = info.partitions
        self._host(self._metadata.add_partitions(name, count), first=before)
        log.info("topic %s grew from %d to %d partitions", name, before, count)

    async def alter_topic_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                                  validate_only: bool = False) -> None:
        """Store the topic's new overrides in the registry, then apply them to its logs at once."""
        info = self._metadata.topics.get(name)
        if info is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        configs = change(dict(info.configs))
        if validate_only:
            return
        self._metadata.set_topic_configs(name, configs)
        self._replica_manager.update_log_config(name, range(info.partitions),
                                                topic_log_config(self._default_log_config, configs))
        log.info("topic %s now overrides %s", name, configs or "no config")

    def _check_capacity(self, added: int) -> None:
        hosted = sum(info.partitions for info in self._metadata.topics.values())
        limit = max_hosted_partitions()
        if hosted + added > limit:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"{added} more partitions would make {hosted + added} on this broker, more than the "
                             f"{limit} its open-files limit allows ({FILES_PER_PARTITION} descriptors each, half "
                             f"the limit); raise the limit (ulimit -n) to host more")

    async def delete_topic(self, name: str, timeout_ms: int = 30000) -> None:
        """Delete a topic and its logs at once."""
        info = self._metadata.topics.get(name)
        if info is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        self._metadata.delete_topic(name)
        for index in range(info.partitions):
            self._replica_manager.stop_partition(name, index, delete=True)
        log.info("deleted topic %s", name)
