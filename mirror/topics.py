"""Target topics made like their sources: created before the first record is sent to them.

A topic missing in the target is created with the largest partition count any source has for it (the
datacenters aggregate into one topic; see the README on partition mapping) and the topic settings of the
first source that has it (sources in name order), minus ``topic.config.exclude``. Several mirror processes
may race to create it; the loser finds it created.

A target topic with fewer partitions than a source partition needs (the source gained partitions, or the
target was made smaller by hand) is grown with CreatePartitions to the largest source count, when the record
of the first new source partition comes; mirror processes racing to grow it find it grown. Only a target that
cannot be grown (its brokers refuse or do not serve CreatePartitions) is an error: sending the record
elsewhere would break the per-partition order and the key -> partition mapping.

Sizes: the mirror adds lineage headers, so a record as large as its source topic allows (its max.message.bytes,
in effect: the topic's own or the source broker's default) would not fit a target topic of the same limit. A
target topic is created with max.message.bytes = the largest source limit + ``header_allowance``; an existing
one below that is raised to it (IncrementalAlterConfigs), or, when the target refuses, kept (its records above
it are then quarantined by the mirror). :meth:`TopicSync.max_message_bytes` says what the target takes.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping, Protocol, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pipeline.client.admin import AdminClient
from pipeline.client.errors import UnknownTopicError, UnsupportedVersionError
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.zk import layout

__all__ = ["BrokerSourceTopics", "MirrorTopicError", "SourceTopics", "TopicSync", "ZooKeeperSourceTopics"]

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = "max.message.bytes"

_T = TypeVar("_T")

# How often a topic created by another mirror is looked up until the target shows it.
VISIBILITY_POLL_S = 0.1


class MirrorTopicError(Exception):
    """A target topic cannot hold what a source sends it."""


class SourceTopics(Protocol):
    """What the mirror reads of a source's topics: partition counts and config overrides."""

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count; None if the source does not have it."""
        ...

    def configs(self, topic: str) -> dict[str, str] | None:
        """The topic's config overrides; None if the source does not have it."""
        ...

    def max_message_bytes(self, topic: str) -> int | None:
        """The largest record batch the source takes for the topic (max.message.bytes in effect); None if the
        source does not have it."""
        ...


def _unless_unknown(ask: Callable[[], _T]) -> _T | None:
    """``ask()``, or None when the topic it asks about does not exist."""
    try:
        return ask()
    except UnknownTopicError:
        return None
    except KafkaProtocolError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        raise


def _effective_max_message_bytes(admin: AdminClient, topic: str) -> int | None:
    configs = _unless_unknown(lambda: admin.describe_configs(topic))
    value = None if configs is None else configs.get(MAX_MESSAGE_BYTES)
    return None if value is None else int(value)


class ZooKeeperSourceTopics:
    """A source's topics as its ZooKeeper registry holds them; their limits (which may be the brokers' defaults,
    not in ZooKeeper) as its brokers describe them."""

    def __init__(self, zk: KazooClient, admin: AdminClient | None = None) -> None:
        self._zk = zk
        self._admin = admin

    def max_message_bytes(self, topic: str) -> int | None:
        return None if self._admin is None else _effective_max_message_bytes(self._admin, topic)

    def partitions(self, topic: str) -> int | None:
        try:
            return len(layout.parse_topic_assignment(self._zk.get(layout.topic_path(topic))[0]))
        except NoNodeError:
            return None

    def configs(self, topic: str) -> dict[str, str] | None:
        try:
            data = self._zk.get(layout.topic_config_path(topic))[0]
        except NoNodeError:
            return {} if self._zk.exists(layout.topic_path(topic)) is not None else None
        return {k: str(v) for k, v in layout.decode(data).get("config", {}).items()}


class BrokerSourceTopics:
    """A source's topics as its brokers describe them (Metadata and DescribeConfigs)."""

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin

    def partitions(self, topic: str) -> int | None:
        return _unless_unknown(lambda: len(self._admin.describe_topics([topic])[0].partitions))

    def configs(self, topic: str) -> dict[str, str] | None:
        try:
            return self._admin.describe_configs(topic, overrides_only=True)
        except UnknownTopicError:
            return None

    def max_message_bytes(self, topic: str) -> int | None:
        return _effective_max_message_bytes(self._admin, topic)


class TopicSync:
    """Ensures target topics exist with enough partitions; thread-safe, cached per topic."""

    def __init__(self, sources: Mapping[str, SourceTopics], admin: AdminClient, exclude: tuple[str, ...] = (),
                 header_allowance: int = 0) -> None:
        self._sources = dict(sorted(sources.items()))
        self._admin = admin
        self._exclude = frozenset(exclude)
        self._header_allowance = header_allowance
        self._partitions: dict[str, int] = {}
        self._limits: dict[str, int] = {}
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
                known = self._visible_partitions(topic)
            if partition >= known:
                known = self._grow(topic, known, partition)
            if topic not in self._limits:
                self._limits[topic] = self._sized(topic)
            self._partitions[topic] = known

    def max_message_bytes(self, topic: str) -> int | None:
        """The largest batch the target takes for ``topic``, once ``ensure`` saw it (None before)."""
        return self._limits.get(topic)

    def needed_max_message_bytes(self, topic: str) -> int | None:
        """The largest source limit of ``topic`` plus the lineage headers; None if no source says."""
        limits = [limit for source in self._sources.values()
                  if (limit := source.max_message_bytes(topic)) is not None]
        return max(limits) + self._header_allowance if limits else None

    def _sized(self, topic: str) -> int:
        """The target topic's max.message.bytes, raised to what the sources need when it is below that."""
        current = self._described_max_message_bytes(topic)
        needed = self.needed_max_message_bytes(topic)
        if needed is None or current >= needed:
            return current
        try:
            self._admin.alter_configs(topic, {MAX_MESSAGE_BYTES: str(needed)})
        except KafkaProtocolError as exc:
            if exc.retriable:
                raise
            log.warning("target topic %s takes batches of up to %d bytes, below the %d its sources' records may need "
                        "with the lineage headers, and cannot be raised (%s): larger records are quarantined",
                        topic, current, needed, exc)
            return current
        log.info("raised max.message.bytes of target topic %s from %d to %d (the sources' limit plus the lineage "
                 "headers)", topic, current, needed)
        return needed

    def _described_max_message_bytes(self, topic: str) -> int:
        """The target topic's max.message.bytes in effect. A topic another mirror has just created is in the
        target's registry before every broker knows it, and a broker that does not yet answers its configs as an
        unknown topic: asked again until it says."""
        return self._asked_until_known(lambda: _effective_max_message_bytes(self._admin, topic),
                                       f"target topic {topic!r} does not say its max.message.bytes", "seen")

    def _visible_partitions(self, topic: str) -> int:
        """The partition count of a topic just created, here or by a racing mirror whose creation the target
        may still be carrying out: looked up until it shows."""
        return self._asked_until_known(lambda: self._target_partitions(topic),
                                       f"target topic {topic!r} is not visible", "created")

    def _asked_until_known(self, ask: Callable[[], int | None], failure: str, since: str) -> int:
        """``ask()`` again until it answers, for as long as an admin request may take."""
        deadline = time.monotonic() + self._admin.timeout_s
        while True:
            answer = ask()
            if answer is not None:
                return answer
            if time.monotonic() >= deadline:
                raise MirrorTopicError(f"{failure} {self._admin.timeout_s:.0f}s after it was {since}")
            time.sleep(VISIBILITY_POLL_S)

    def _grow(self, topic: str, known: int, partition: int) -> int:
        """Grow the target topic to the largest source count (at least ``partition`` + 1); its new count."""
        counts = self.source_partitions(topic)
        wanted = max([partition + 1, *counts.values()])
        try:
            self._admin.create_partitions(topic, wanted)
        except UnsupportedVersionError as exc:
            refusal: Exception | None = exc
        except KafkaProtocolError as exc:
            if exc.retriable:
                raise
            refusal = exc  # INVALID_PARTITIONS when another mirror grew it first: looked at below
        else:
            refusal = None
            log.info("grew target topic %s from %d to %d partitions (source partition counts: %s)", topic, known,
                     wanted, counts)
        grown = self._target_partitions(topic) or 0
        if partition >= grown:
            raise MirrorTopicError(
                f"target topic {topic!r} has {grown} partitions, but source partition {partition} must go to "
                f"partition {partition} (source partition counts: {counts}) and the target cannot be grown to "
                f"{wanted} ({refusal}); add partitions to the target topic")
        return grown

    def source_partitions(self, topic: str) -> dict[str, int]:
        """Partition count of ``topic`` in each source that has it."""
        counts = {}
        for name, source in self._sources.items():
            count = source.partitions(topic)
            if count is not None:
                counts[name] = count
        return counts

    def source_configs(self, topic: str) -> dict[str, str]:
        """The topic settings of the first source that has ``topic``, without the excluded ones."""
        for source in self._sources.values():
            configs = source.configs(topic)
            if configs is not None:
                return {k: v for k, v in configs.items() if k not in self._exclude}
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
        needed = self.needed_max_message_bytes(topic)
        if needed is not None:
            configs[MAX_MESSAGE_BYTES] = str(max(needed, int(configs.get(MAX_MESSAGE_BYTES, 0))))
        partitions = max(counts.values())
        try:
            self._admin.create_topics(topic, partitions=partitions, configs=configs)
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise MirrorTopicError(f"cannot create target topic {topic!r}: {exc}") from exc
            return
        self.created.append(topic)
        log.info("created target topic %s: %d partitions, settings %s", topic, partitions, configs)
