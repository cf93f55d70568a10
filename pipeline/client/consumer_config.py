"""The consumers' configuration tables (Consumer, ConsumerConnector, StaticConsumerConnector): Kafka 0.7/0.8 property names, modern aliases."""

from __future__ import annotations

from typing import Any, Mapping

from pipeline.client.isolation import parse_isolation_level
from pipeline.config import Config, ConfigError, Property, parse_bool, parse_str
from pipeline.security.client_settings import SECURITY_PROPERTIES, ClientSecurity
from pipeline.zk.security import ZOOKEEPER_SECURITY_PROPERTIES, ZooKeeperSecurity

MiB = 1024 * 1024

# auto.offset.reset values, each mapped to the paper-era name.
_OFFSET_RESET = {"smallest": "smallest", "earliest": "smallest", "largest": "largest", "latest": "largest",
                 "none": "none"}


def parse_offset_reset(text: str) -> str:
    """smallest|largest (aliases earliest|latest) or none (raise OffsetOutOfRange instead of resetting)."""
    value = _OFFSET_RESET.get(text.strip().lower())
    if value is None:
        raise ValueError(f"expected smallest, largest, earliest, latest or none, got {text!r}")
    return value


CONSUMER_CONFIG = (
    Property("metadata.broker.list", parse_str, "localhost:9092",
             "Brokers to bootstrap from, host:port[,host:port...].", aliases=("bootstrap.servers",)),
    Property("client.id", parse_str, "pipeline-consumer", "Client id sent with every request."),
    Property("fetch.message.max.bytes", int, MiB, "Bytes fetched per partition per request.",
             aliases=("fetch.size", "max.partition.fetch.bytes")),
    Property("fetch.max.bytes", int, 50 * MiB,
             "Ceiling up to which a partition's fetch size is doubled when its next batch does not fit."),
    Property("fetch.wait.max.ms", int, 100, "Longest time the broker holds a fetch waiting for fetch.min.bytes.",
             aliases=("fetch.max.wait.ms",)),
    Property("fetch.min.bytes", int, 1, "Bytes a fetch waits for before the broker answers (long poll)."),
    Property("socket.timeout.ms", int, 30000, "Socket timeout; must exceed fetch.wait.max.ms.",
             aliases=("request.timeout.ms",)),
    Property("auto.offset.reset", parse_offset_reset, "largest",
             "Where to restart when an offset is out of range: smallest|largest (earliest|latest), or none."),
    Property("consumer.timeout.ms", int, -1,
             "End an iteration after this long without a message (-1: block forever)."),
    Property("refresh.leader.backoff.ms", int, 200,
             "Wait before retrying after a leader move or connection error.", aliases=("retry.backoff.ms",)),
    Property("topic.metadata.refresh.interval.ms", int, 600_000, "Refresh the cluster metadata at least this often.",
             aliases=("metadata.max.age.ms",)),
    Property("isolation.level", parse_isolation_level, 0,
             "read_uncommitted (0): every record up to the high watermark; read_committed (1): only committed "
             "transactions' records, up to the last stable offset.", at_least=0, at_most=1),
    *SECURITY_PROPERTIES,
)


class ConsumerConfig(Config):
    """Validated Consumer properties (see CONSUMER_CONFIG)."""

    kind = "consumer property"
    table = CONSUMER_CONFIG

    def __init__(self, values: Mapping[str, Any] | str | None = None) -> None:
        super().__init__(self.table, values)
        self.require_positive("fetch.message.max.bytes", "fetch.max.bytes", "socket.timeout.ms")
        if self["fetch.max.bytes"] < self["fetch.message.max.bytes"]:
            raise ConfigError("fetch.max.bytes must be at least fetch.message.max.bytes")
        if self["fetch.wait.max.ms"] < 0 or self["fetch.min.bytes"] < 0 or self["refresh.leader.backoff.ms"] < 0:
            raise ConfigError("fetch.wait.max.ms, fetch.min.bytes and refresh.leader.backoff.ms cannot be negative")
        if self["socket.timeout.ms"] <= self["fetch.wait.max.ms"]:
            raise ConfigError("socket.timeout.ms must be larger than fetch.wait.max.ms")
        self.security = ClientSecurity.from_values(self.as_dict())


QUEUED_CHUNKS = Property("queued.max.message.chunks", int, 10,
                         "Fetched chunks (one partition's fetch result) each stream buffers ahead of its reader.")

# A StaticConsumerConnector (no group: every partition of its topics, offsets in a file) takes a Consumer's
# properties and buffers chunks per stream as the ConsumerConnector does.
STATIC_CONNECTOR_CONFIG = CONSUMER_CONFIG + (QUEUED_CHUNKS,)


class StaticConnectorConfig(ConsumerConfig):
    """Validated StaticConsumerConnector properties (see STATIC_CONNECTOR_CONFIG)."""

    kind = "static consumer connector property"
    table = STATIC_CONNECTOR_CONFIG


# The ConsumerConnector (the paper's high-level consumer) finds brokers through ZooKeeper, so it takes
# the fetch properties above without metadata.broker.list, plus the group's coordination properties.
CONSUMER_CONNECTOR_CONFIG = tuple(p for p in CONSUMER_CONFIG if p.name != "metadata.broker.list") + (
    Property("zookeeper.connect", parse_str, None,
             "The cluster's ZooKeeper, host:port[,host:port...]/chroot.", aliases=("zk.connect",)),
    Property("group.id", parse_str, None, "The consumer group this consumer belongs to.", aliases=("groupid",)),
    Property("consumer.id", parse_str, None,
             "This consumer's id in the group (default: host name and a random suffix)."),
    Property("auto.commit.enable", parse_bool, True,
             "Commit the consumed offsets to ZooKeeper every auto.commit.interval.ms.",
             aliases=("autocommit.enable", "enable.auto.commit")),
    Property("auto.commit.interval.ms", int, 60_000, "How often offsets are committed automatically.",
             aliases=("autocommit.interval.ms",)),
    QUEUED_CHUNKS,
    Property("rebalance.backoff.ms", int, 2000,
             "Wait before retrying a rebalance that found a partition still owned by another consumer."),
    Property("zookeeper.session.timeout.ms", int, 6000,
             "ZooKeeper session timeout: how soon the group notices this consumer died.",
             aliases=("zk.sessiontimeout.ms",)),
    Property("zookeeper.connection.timeout.ms", int, 6000, "Longest wait for the first ZooKeeper connection.",
             aliases=("zk.connectiontimeout.ms",)),
    *ZOOKEEPER_SECURITY_PROPERTIES,
)


class ConsumerConnectorConfig(Config):
    """Validated ConsumerConnector properties (see CONSUMER_CONNECTOR_CONFIG)."""

    kind = "consumer connector property"

    def __init__(self, values: Mapping[str, Any] | str | None = None) -> None:
        super().__init__(CONSUMER_CONNECTOR_CONFIG, values)
        for name in ("zookeeper.connect", "group.id"):
            if not self[name]:
                raise ConfigError(f"{self.kind} {name} is required")
        if "/" in self["group.id"]:
            raise ConfigError(f"{self.kind} group.id must not contain '/', got {self['group.id']!r}")
        self.require_positive("fetch.message.max.bytes", "fetch.max.bytes", "socket.timeout.ms",
                              "auto.commit.interval.ms", "queued.max.message.chunks",
                              "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms")
        if self["fetch.max.bytes"] < self["fetch.message.max.bytes"]:
            raise ConfigError("fetch.max.bytes must be at least fetch.message.max.bytes")
        for name in ("fetch.wait.max.ms", "fetch.min.bytes", "refresh.leader.backoff.ms", "rebalance.backoff.ms"):
            if self[name] < 0:
                raise ConfigError(f"{self.kind} {name} cannot be negative")
        if self["socket.timeout.ms"] <= self["fetch.wait.max.ms"]:
            raise ConfigError("socket.timeout.ms must be larger than fetch.wait.max.ms")
        self.security = ClientSecurity.from_values(self.as_dict())
        self.zookeeper_security = ZooKeeperSecurity.from_values(self.as_dict())
