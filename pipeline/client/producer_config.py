"""The producer's configuration table: Kafka 0.7/0.8 property names, modern names as aliases.

``ProducerConfig(values)`` validates a dict or a properties file against :data:`PRODUCER_PROPERTIES` and
exposes the derived settings the producer needs (codec id, acks, seconds instead of milliseconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pipeline.config import INT32_MAX, Config, ConfigError, Property, parse_bool, parse_choice, parse_str
from pipeline.protocol.compression import UnknownCodecError, codec_from_name
from pipeline.security.client_settings import SECURITY_PROPERTIES, ClientSecurity

__all__ = ["DEFAULT_DELIVERY_TIMEOUT_MS", "MAX_IN_FLIGHT_IDEMPOTENT", "PRODUCER_PROPERTIES", "ProducerConfig",
           "parse_acks"]

# Kafka's defaults since 2.1: retries bounded by time (delivery.timeout.ms), the count effectively unlimited.
DEFAULT_DELIVERY_TIMEOUT_MS = 120000


def parse_acks(text: str) -> int:
    """0, 1, or -1 (also spelled ``all``)."""
    value = text.strip().lower()
    if value == "all":
        return -1
    return int(value)


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_spec(text: str) -> Any:
    return text.strip()


PRODUCER_PROPERTIES = (
    Property("metadata.broker.list", parse_str, None,
             "brokers to bootstrap from, host:port[,host:port...]", aliases=("bootstrap.servers", "broker.list")),
    Property("zookeeper.connect", parse_str, None,
             "find brokers and partition leaders in the cluster's ZooKeeper registry (host:port[,...]/chroot), "
             "kept current by watches, instead of metadata.broker.list", aliases=("zk.connect",)),
    Property("zookeeper.session.timeout.ms", _parse_int, 6000, "ZooKeeper session timeout",
             aliases=("zk.sessiontimeout.ms",)),
    Property("zookeeper.connection.timeout.ms", _parse_int, 6000, "longest wait for the first ZooKeeper connection",
             aliases=("zk.connectiontimeout.ms",)),
    Property("producer.type", parse_choice("sync", "async"), "sync",
             "sync: send() returns once the request is written (acks=0) or acknowledged; "
             "async: send() queues and a background thread sends batches"),
    Property("batch.size", _parse_int, 200,
             "async: messages per batch (per topic-partition) before it is sent", aliases=("batch.num.messages",)),
    Property("queue.time", _parse_int, 5000,
             "async: longest time in ms a message waits in the queue for its batch to fill",
             aliases=("queue.buffering.max.ms", "linger.ms")),
    Property("queue.buffering.max.messages", _parse_int, 10000,
             "async: most messages the queue holds", aliases=("queue.size",)),
    Property("queue.enqueue.timeout.ms", _parse_int, -1,
             "async, queue full: -1 block until there is room, 0 raise QueueFullError at once, "
             ">0 wait that long then raise"),
    Property("request.required.acks", parse_acks, 0,
             "0: no acknowledgement; 1: the leader wrote it; -1/all: all in-sync replicas have it",
             aliases=("acks",)),
    Property("request.timeout.ms", _parse_int, 10000,
             "how long the broker may wait for acks, and we for its answer", aliases=("request.timeout",)),
    Property("message.send.max.retries", _parse_int, INT32_MAX,
             "most times a batch is retried on retriable errors; the default, effectively unlimited, leaves the "
             "bound to delivery.timeout.ms", aliases=("retries",)),
    Property("delivery.timeout.ms", _parse_int, DEFAULT_DELIVERY_TIMEOUT_MS,
             "longest time from send() taking a message until it is reported stored or failed: retriable errors "
             "(no leader, a broker down, an election) are retried until then; at least queue.time (async) + "
             "request.timeout.ms"),
    Property("retry.backoff.ms", _parse_int, 100, "pause before each retry, after a metadata refresh"),
    Property("compression.codec", parse_str, "none",
             "none, gzip, snappy, lz4 or zstd (whole batches are compressed)", aliases=("compression.type",)),
    Property("serializer.class", _parse_spec, "pipeline.client.encoder.DefaultEncoder",
             "Encoder for messages (dotted path or instance)", aliases=("value.serializer",)),
    Property("key.serializer.class", _parse_spec, "pipeline.client.encoder.DefaultEncoder",
             "Encoder for keys (dotted path or instance)", aliases=("key.serializer",)),
    Property("partitioner.class", _parse_spec, "pipeline.client.partitioner.DefaultPartitioner",
             "Partitioner (dotted path or instance)"),
    Property("client.id", parse_str, "pipeline-producer", "client id sent with every request"),
    Property("topic.metadata.refresh.interval.ms", _parse_int, 600000,
             "how often topic metadata is refreshed even without errors", aliases=("metadata.max.age.ms",)),
    Property("max.request.size", _parse_int, 1048576,
             "largest Produce request in bytes; bigger batches are split, a bigger single message is an error"),
    Property("connect.timeout.ms", _parse_int, 10000, "socket connect and read timeout for broker connections"),
    Property("enable.idempotence", parse_bool, False,
             "get a producer id from the brokers and number each partition's batches, so that a retried batch "
             "is stored once; needs acks=all (the default then) and retries > 0"),
    Property("max.in.flight.requests.per.connection", _parse_int, None,
             "most Produce requests sent to one broker before waiting for an answer; unset: no limit, or 5 with "
             "enable.idempotence, which allows at most 5 (the batches a broker remembers per producer)"),
    Property("transactional.id", parse_str, None,
             "make the producer transactional (init_transactions, begin/commit/abort_transaction, "
             "send_offsets_to_transaction) under this id, which a restarted instance reuses to fence the old one; "
             "implies enable.idempotence and acks=all"),
    Property("transaction.timeout.ms", _parse_int, 60000,
             "longest time the transaction coordinator lets a transaction stay open before aborting it; at most "
             "the brokers' transaction.max.timeout.ms"),
    Property("max.block.ms", _parse_int, 60000,
             "longest time init_transactions, send_offsets_to_transaction, commit_transaction and "
             "abort_transaction block when given no timeout"),
    *SECURITY_PROPERTIES,
)

# Kafka's limit: a broker remembers the last five batches of each producer to recognise retries.
MAX_IN_FLIGHT_IDEMPOTENT = 5


class ProducerConfig(Config):
    """Validated producer properties plus the derived values the producer uses."""

    kind = "producer property"

    def __init__(self, values: Mapping[str, Any] | str | Path | None = None) -> None:
        super().__init__(PRODUCER_PROPERTIES, values)
        if not self["metadata.broker.list"] and not self["zookeeper.connect"]:
            raise ConfigError("producer property metadata.broker.list (bootstrap.servers) or zookeeper.connect "
                              "(zk.connect) is required")
        self.require_positive("zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms",
                              "batch.size", "queue.buffering.max.messages", "request.timeout.ms",
                              "max.request.size", "connect.timeout.ms", "topic.metadata.refresh.interval.ms")
        for name in ("queue.time", "message.send.max.retries", "retry.backoff.ms"):
            if self[name] < 0:
                raise ConfigError(f"{self.kind} {name} must not be negative, got {self[name]}")
        if self["queue.enqueue.timeout.ms"] < -1:
            raise ConfigError(f"{self.kind} queue.enqueue.timeout.ms must be -1, 0 or positive, "
                              f"got {self['queue.enqueue.timeout.ms']}")
        if self["request.required.acks"] not in (0, 1, -1):
            raise ConfigError(f"{self.kind} request.required.acks must be 0, 1 or -1/all, "
                              f"got {self['request.required.acks']}")
        if self["producer.type"] not in ("sync", "async"):
            raise ConfigError(f"{self.kind} producer.type must be sync or async, got {self['producer.type']!r}")
        codec = self["compression.codec"]
        try:
            self.compression = codec if isinstance(codec, int) else codec_from_name(str(codec))
        except UnknownCodecError as exc:
            raise ConfigError(f"{self.kind} compression.codec: {exc}") from None
        if not 0 <= self.compression <= 4:
            raise ConfigError(f"{self.kind} compression.codec id must be 0-4, got {self.compression}")
        self.security = ClientSecurity.from_values(self.as_dict())
        self.transactional_id: str | None = self["transactional.id"] or None
        if self.transactional_id is not None and "enable.idempotence" in self.given and not self["enable.idempotence"]:
            raise ConfigError(f"{self.kind} transactional.id needs enable.idempotence=true (or unset)")
        self.require_positive("transaction.timeout.ms", "max.block.ms")
        self.transaction_timeout_ms: int = self["transaction.timeout.ms"]
        self.max_block_s: float = self["max.block.ms"] / 1000.0
        self.idempotent: bool = bool(self["enable.idempotence"]) or self.transactional_id is not None
        if self.idempotent:
            self._check_idempotence()
        self.acks: int = -1 if self.idempotent else self["request.required.acks"]
        self.is_async: bool = self["producer.type"] == "async"
        self.batch_size: int = self["batch.size"]
        self.linger_s: float = self["queue.time"] / 1000.0
        self.queue_max: int = self["queue.buffering.max.messages"]
        self.enqueue_timeout_ms: int = self["queue.enqueue.timeout.ms"]
        self.retries: int = self["message.send.max.retries"]
        self.delivery_timeout_s: float = self._delivery_timeout_ms() / 1000.0
        self.retry_backoff_s: float = self["retry.backoff.ms"] / 1000.0
        self.request_timeout_ms: int = self["request.timeout.ms"]
        self.max_request_size: int = self["max.request.size"]
        self.metadata_max_age_s: float = self["topic.metadata.refresh.interval.ms"] / 1000.0
        self.client_id: str = self["client.id"]
        self.connect_timeout_s: float = self["connect.timeout.ms"] / 1000.0
        in_flight = self["max.in.flight.requests.per.connection"]
        if in_flight is not None and in_flight <= 0:
            raise ConfigError(f"{self.kind} max.in.flight.requests.per.connection must be positive, got {in_flight}")
        self.max_in_flight: int | None = MAX_IN_FLIGHT_IDEMPOTENT if in_flight is None and self.idempotent \
            else in_flight

    def _delivery_timeout_ms(self) -> int:
        """delivery.timeout.ms, checked against Kafka's rule that it covers the linger and one request: given too
        small, a ConfigError; left at its default while the other two add up to more, raised to their sum."""
        linger_ms = self["queue.time"] if self["producer.type"] == "async" else 0
        floor = linger_ms + self["request.timeout.ms"]
        timeout = self["delivery.timeout.ms"]
        if "delivery.timeout.ms" in self.given:
            if timeout < floor:
                raise ConfigError(
                    f"{self.kind} delivery.timeout.ms={timeout} must be at least "
                    + (f"queue.time (linger.ms) {linger_ms} + " if linger_ms else "")
                    + f"request.timeout.ms {self['request.timeout.ms']} = {floor}")
            return timeout
        return max(timeout, floor)

    def _check_idempotence(self) -> None:
        """Kafka's rules for enable.idempotence=true: acks=all (set when not given), retries, a small window."""
        if "request.required.acks" in self.given and self["request.required.acks"] != -1:
            raise ConfigError(f"{self.kind} enable.idempotence=true (or a transactional.id) needs request.required.acks (acks) = all (-1), "
                              f"got {self['request.required.acks']}")
        if self["message.send.max.retries"] == 0:
            raise ConfigError(f"{self.kind} enable.idempotence=true needs message.send.max.retries (retries) > 0")
        if (self["max.in.flight.requests.per.connection"] or 0) > MAX_IN_FLIGHT_IDEMPOTENT:
            raise ConfigError(f"{self.kind} enable.idempotence=true allows max.in.flight.requests.per.connection "
                              f"up to {MAX_IN_FLIGHT_IDEMPOTENT}, got {self['max.in.flight.requests.per.connection']}")
