"""Broker configuration: Kafka's server.properties names, declared once as a table, parsed and validated.

Every property the broker understands is one row of ``PROPERTIES``: its Kafka name, type, default and
meaning. A properties file and ``--override key=value`` pairs are read into a :class:`KafkaConfig`, which
exposes values by Kafka name (``config["log.segment.bytes"]``) and derives the settings the layers below
need (listener address, log directories, :class:`~broker.log.log_config.LogConfig`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from broker.security.listeners import (
    LISTENER_PROPERTIES,
    EndPoint,
    parse_endpoints,
    parse_protocol_map,
    uses_sasl,
    uses_ssl,
)
from broker.security.ssl_factory import SSL_PROPERTIES, SslSettings
from broker.log.log_config import (
    CLEANER_PAUSE_POINTS,
    MIN_INDEX_BYTES,
    MIN_SEGMENT_BYTES,
    LogConfig,
    parse_cleanup_policy,
)
from pipeline.config import (
    INT32_MAX,
    INT64_MAX,
    Config,
    ConfigError,
    Property,
    help_table,
    parse_bool as _bool,
    parse_float,
    parse_optional_int as _optional_int,
    parse_overrides,
    parse_str as _str,
    read_properties_file,
)
from broker.security.sasl_mechanisms import SUPPORTED_MECHANISMS
from pipeline.security.client_settings import ClientSecurity
from pipeline.service.settings import LOG_LEVEL
from broker.security.authorizer import AUTHORIZER_CLASS_NAMES
from pipeline.testing_faults import fault_properties
from pipeline.zk.security import ZOOKEEPER_SECURITY_PROPERTIES

# Where testing.pause.at stops the transaction coordinator: PrepareCommit or PrepareAbort is stored, the client not
# yet answered and no marker written (a test kills the coordinator there; its successor completes the transaction).
TRANSACTION_PAUSE_POINTS = ("transaction-prepared",)

__all__ = ["ConfigError", "KafkaConfig", "PROPERTIES", "help_text", "parse_overrides", "read_properties_file"]

MiB = 1024 * 1024
# Per-listener settings (listener.name.<listener lower case>.<setting>), kept aside from the table.
LISTENER_PREFIX = "listener.name."


def _mechanism(text: str) -> str:
    value = text.strip().upper()
    if value not in SUPPORTED_MECHANISMS:
        raise ValueError(f"expected one of {', '.join(SUPPORTED_MECHANISMS)}, got {text!r}")
    return value


def _mechanisms(text: str) -> str:
    return ",".join(_mechanism(part) for part in text.split(",") if part.strip())


PROPERTIES: tuple[Property, ...] = (
    Property("broker.id", int, 0, "This broker's id within its cluster.",
             at_least=0, at_most=INT32_MAX),
    *LISTENER_PROPERTIES,
    Property("host.name", _str, "127.0.0.1", "Address of the PLAINTEXT listener when listeners is not set."),
    Property("port", int, 9092, "TCP port of the PLAINTEXT listener when listeners is not set (0 picks a free one).",
             at_least=0, at_most=65535),
    Property("advertised.host.name", _str, "",
             "Host given to clients in Metadata for the PLAINTEXT listener of host.name and port (when listeners "
             "is not set), and for listeners bound to every interface (default: 127.0.0.1)."),
    *SSL_PROPERTIES,
    Property("log.dirs", _str, "", "Comma-separated directories holding the partition logs."),
    Property("log.dir", _str, "/tmp/kafka-logs", "The log directory when log.dirs is not set."),
    Property("num.partitions", int, 1, "Partitions of a topic created automatically or without a count.",
             at_least=1, at_most=INT32_MAX),
    Property("auto.create.topics.enable", _bool, True, "Create a topic when a client asks for an unknown one."),
    Property("default.replication.factor", int, 1, "Replication factor of automatically created topics.",
             at_least=1, at_most=INT32_MAX),
    Property("log.segment.bytes", int, 1024 * MiB, "Roll a new segment when the active one reaches this size.",
             at_least=MIN_SEGMENT_BYTES, at_most=INT32_MAX),
    Property("log.roll.ms", _optional_int, None, "Roll a new segment after this age (overrides log.roll.hours).",
             at_least=1, at_most=INT64_MAX),
    Property("log.roll.hours", int, 168, "Roll a new segment after this many hours.",
             at_least=1, at_most=INT32_MAX),
    Property("log.index.interval.bytes", int, 4096, "Bytes of log between two entries of the sparse index.",
             at_least=0, at_most=INT32_MAX),
    Property("log.index.size.max.bytes", int, 10 * MiB, "Largest offset index file; a full index rolls the segment.",
             at_least=MIN_INDEX_BYTES, at_most=INT32_MAX),
    Property("log.flush.interval.messages", _optional_int, None, "fsync a log after this many messages (unset: page cache).",
             at_least=1, at_most=INT64_MAX),
    Property("log.flush.interval.ms", _optional_int, None, "fsync a log when its oldest unflushed message is this old.",
             at_least=0, at_most=INT64_MAX),
    Property("log.flush.scheduler.interval.ms", int, 1000, "How often the time-based flush policy is checked.",
             at_least=1, at_most=INT64_MAX),
    Property("log.flush.offset.checkpoint.interval.ms", int, 60000, "How often recovery points are checkpointed.",
             at_least=1, at_most=INT32_MAX),
    Property("log.retention.ms", _optional_int, None, "Delete segments older than this (overrides minutes and hours; -1: keep).",
             at_least=-1, at_most=INT64_MAX),
    Property("log.retention.minutes", _optional_int, None, "Delete segments older than this many minutes.",
             at_most=INT32_MAX),
    Property("log.retention.hours", int, 168, "Delete segments older than this many hours.",
             at_most=INT32_MAX),
    Property("log.retention.bytes", int, -1, "Delete oldest segments while a partition is larger than this (-1: no limit).",
             at_most=INT64_MAX),
    Property("log.retention.check.interval.ms", int, 300000, "How often retention is enforced.",
             at_least=1, at_most=INT64_MAX),
    Property("message.max.bytes", int, 1048588, "Largest record batch the broker accepts.",
             at_least=0, at_most=INT32_MAX),
    Property("socket.request.max.bytes", int, 100 * MiB, "Largest request frame; a larger one closes the connection.",
             at_least=1, at_most=INT32_MAX),
    Property("queued.max.request.bytes", int, 100 * MiB,
             "Request bytes read but not yet answered, across all connections; at this many, the broker stops "
             "reading sockets until some are answered (-1: no cap). One request larger than the rest of the "
             "cap is still read.", at_least=-1, at_most=INT64_MAX),
    Property("connections.max.idle.ms", int, 600000, "Close connections silent for this long (-1: never).",
             at_least=-1, at_most=INT64_MAX),
    Property("socket.request.read.timeout.ms", int, 10000,
             "Close a connection silent for this long in the middle of a request frame (-1: never); a client that "
             "sent part of a request and stopped holds its connection only this long, not connections.max.idle.ms.",
             at_least=-1, at_most=INT64_MAX),
    Property("max.connections", int, INT32_MAX,
             "Connections the broker keeps open (default unlimited, as in Kafka); at the limit, a connection from an "
             "address holding fewer than the busiest one replaces that address's least recently active one, "
             "others are closed right after accept.", at_least=0, at_most=INT32_MAX),
    Property("max.connections.per.ip", int, INT32_MAX,
             "Connections from one address (the protection against one client taking them all); more are closed "
             "right after accept.", at_least=0, at_most=INT32_MAX),
    Property("max.connections.per.ip.overrides", _str, "",
             "Per-address exceptions to max.connections.per.ip: host:count,host:count."),
    Property("socket.sendfile.enable", _bool, True,
             "Send fetched log data with sendfile (zero copy); false reads it into memory and sends that."),
    Property("background.threads", int, 10, "Threads of the scheduler pool running fsyncs, deletions, retention "
             "and checkpoints off the event loop.",
             at_least=1, at_most=INT32_MAX),
    Property("fetch.max.wait.cap.ms", int, 30000, "Upper bound on a Fetch request's max_wait_ms.",
             at_least=0, at_most=INT32_MAX),
    Property("sasl.enabled.mechanisms", _mechanisms, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
             "SASL mechanisms the SASL_* listeners offer (PLAIN is checked against the users' SCRAM credentials); per "
             "listener: listener.name.<listener>.sasl.enabled.mechanisms."),
    Property("sasl.mechanism.inter.broker.protocol", _mechanism, "SCRAM-SHA-512",
             "SASL mechanism this broker logs in with to other brokers over a SASL_* inter-broker listener."),
    Property("sasl.jaas.config", _str, "",
             "This broker's own SASL login to other brokers: 'org.apache.kafka.common.security.scram.ScramLoginModule "
             "required username=\"...\" password=\"...\";' (or per listener and mechanism: "
             "listener.name.<listener>.<mechanism>.sasl.jaas.config)."),
    Property("connections.max.reauth.ms", int, 0,
             "SASL sessions last this long: clients must reauthenticate on the same connection before, or their next "
             "request closes it (0: sessions never expire). Per listener: listener.name.<listener>.connections.max.reauth.ms.",
             at_least=0, at_most=INT64_MAX),
    Property("connection.failed.authentication.delay.ms", int, 100,
             "How long a connection whose SASL authentication failed stays open after its answer before it is "
             "closed (slows down password guessing).", at_least=0, at_most=INT32_MAX),
    Property("sasl.server.max.receive.size", int, 524288,
             "Largest SASL token or request a connection may send before it is authenticated.",
             at_least=1, at_most=INT32_MAX),
    Property("zookeeper.connect", _str, "", "ZooKeeper connect string with chroot; empty runs standalone."),
    Property("zookeeper.session.timeout.ms", int, 18000, "ZooKeeper session timeout: a dead broker leaves after it.",
             at_least=1, at_most=INT32_MAX),
    Property("zookeeper.connection.timeout.ms", int, 18000, "How long to wait for ZooKeeper at start-up.",
             at_least=1, at_most=INT32_MAX),
    *ZOOKEEPER_SECURITY_PROPERTIES,
    Property("min.insync.replicas", int, 1, "In-sync replicas an acks=all produce needs (topic config too).",
             at_least=1, at_most=INT32_MAX),
    Property("unclean.leader.election.enable", _bool, False,
             "Elect a replica outside the ISR when no ISR member is alive (may lose acknowledged messages)."),
    Property("replica.lag.time.max.ms", int, 30000,
             "A follower that has not caught up with the leader for this long leaves the ISR.",
             at_least=1, at_most=INT64_MAX),
    Property("replica.fetch.wait.max.ms", int, 500, "Longest wait of a follower's Fetch for new data.",
             at_least=0, at_most=INT32_MAX),
    Property("replica.fetch.min.bytes", int, 1, "Bytes a follower's Fetch waits for.",
             at_least=1, at_most=INT32_MAX),
    Property("replica.fetch.max.bytes", int, MiB, "Bytes a follower fetches per partition (a larger first batch "
             "still comes whole).", at_least=0, at_most=INT32_MAX),
    Property("replica.fetch.response.max.bytes", int, 10 * MiB, "Bytes a follower's whole Fetch response may hold.",
             at_least=0, at_most=INT32_MAX),
    Property("replica.fetch.backoff.ms", int, 1000, "A follower's pause after a failed fetch from its leader.",
             at_least=0, at_most=INT32_MAX),
    Property("replica.socket.timeout.ms", int, 30000, "Socket timeout of a follower's connection to its leader.",
             at_least=1, at_most=INT32_MAX),
    Property("num.replica.fetchers", int, 1, "Fetcher threads per source broker.",
             at_least=1, at_most=INT32_MAX),
    Property("replica.high.watermark.checkpoint.interval.ms", int, 5000,
             "How often high watermarks are checkpointed (replication-offset-checkpoint).",
             at_least=1, at_most=INT64_MAX),
    Property("controlled.shutdown.enable", _bool, True,
             "On SIGTERM, ask the controller to move this broker's leaderships away before stopping."),
    Property("controlled.shutdown.max.retries", int, 3, "Attempts of a controlled shutdown before stopping anyway.",
             at_least=0, at_most=INT32_MAX),
    Property("controlled.shutdown.retry.backoff.ms", int, 5000,
             "Wait for the controller's answer per controlled-shutdown attempt.", at_least=0, at_most=INT64_MAX),
    Property("auto.leader.rebalance.enable", _bool, True,
             "The controller moves leadership back to preferred replicas when brokers are imbalanced."),
    Property("leader.imbalance.check.interval.seconds", int, 300, "How often the controller checks leader balance.",
             at_least=1, at_most=INT64_MAX),
    Property("leader.imbalance.per.broker.percentage", int, 10,
             "Share of a broker's preferred partitions led elsewhere that triggers a preferred election.",
             at_least=0, at_most=100),
    Property("log.cleanup.policy", lambda text: ",".join(sorted(parse_cleanup_policy(text))), "delete",
             "What happens to old segments: delete (retention), compact (keep each key's latest record) or "
             "compact,delete."),
    Property("log.cleaner.enable", _bool, True, "Run the log cleaner, which compacts the logs of compact topics."),
    Property("log.cleaner.threads", int, 1, "Threads of the log cleaner.", at_least=0, at_most=INT32_MAX),
    Property("log.cleaner.dedupe.buffer.size", int, 128 * MiB,
             "Memory of the cleaner's key -> offset map, shared by its threads (a pass stops when it is full).",
             at_least=1024, at_most=INT64_MAX),
    Property("log.cleaner.io.buffer.size", int, 512 * 1024, "Read and write buffer of each cleaner thread.",
             at_least=1024, at_most=INT32_MAX),
    Property("log.cleaner.io.max.bytes.per.second", parse_float, float("inf"),
             "The cleaner's read plus write rate limit.", at_least=1.0),
    Property("log.cleaner.min.cleanable.ratio", parse_float, 0.5,
             "Share of a log's size that must be uncleaned before it is compacted (min.cleanable.dirty.ratio).",
             at_least=0.0, at_most=1.0),
    Property("log.cleaner.min.compaction.lag.ms", int, 0, "Records younger than this are not compacted.",
             at_least=0, at_most=INT64_MAX),
    Property("log.cleaner.max.compaction.lag.ms", int, INT64_MAX,
             "Records older than this are compacted whatever the dirty ratio.", at_least=1, at_most=INT64_MAX),
    Property("log.cleaner.delete.retention.ms", int, 86_400_000,
             "How long a tombstone stays after the segment holding it was cleaned.", at_least=0, at_most=INT64_MAX),
    Property("log.cleaner.backoff.ms", int, 15000, "The cleaner's sleep when no log needs cleaning.",
             at_least=0, at_most=INT64_MAX),
    *fault_properties(CLEANER_PAUSE_POINTS + TRANSACTION_PAUSE_POINTS),
    Property("group.min.session.timeout.ms", int, 6000, "Shortest session timeout a group member may ask for.",
             at_least=1, at_most=INT32_MAX),
    Property("group.max.session.timeout.ms", int, 1800000, "Longest session timeout a group member may ask for.",
             at_least=1, at_most=INT32_MAX),
    Property("group.initial.rebalance.delay.ms", int, 3000,
             "How long the first rebalance of an empty group waits for more members to join.",
             at_least=0, at_most=INT32_MAX),
    Property("group.max.size", int, INT32_MAX, "Most members a consumer group may have.",
             at_least=1, at_most=INT32_MAX),
    Property("offsets.retention.minutes", int, 10080,
             "How long the committed offsets of a group stay after it became empty (or after the commit, for "
             "offsets committed outside a group's membership).", at_least=1, at_most=INT32_MAX),
    Property("offsets.retention.check.interval.ms", int, 600000, "How often expired committed offsets are removed.",
             at_least=1, at_most=INT64_MAX),
    Property("offset.metadata.max.bytes", int, 4096, "Longest metadata string a committed offset may carry.",
             at_least=0, at_most=INT32_MAX),
    Property("offsets.commit.timeout.ms", int, 5000,
             "How long an offset commit waits for its store (ZooKeeper or the log dir) before failing.",
             at_least=1, at_most=INT32_MAX),
    Property("offsets.topic.num.partitions", int, 50,
             "Partitions of __consumer_offsets, which the brokers do not keep but place transactions' offset "
             "commits in (Kafka's partitionFor: a group's offsets partition names its transaction marker); "
             "the same on every broker, and never changed once transactions have run.",
             at_least=1, at_most=INT32_MAX),
    Property("transaction.max.timeout.ms", int, 900000,
             "Longest transaction.timeout.ms a transactional producer may ask for (InitProducerId answers "
             "INVALID_TRANSACTION_TIMEOUT above it).", at_least=1, at_most=INT32_MAX),
    Property("transactional.id.expiration.ms", int, 604800000,
             "How long a transactional id with no open transaction is kept after its last transaction (then its "
             "producer id and epoch are forgotten).", at_least=1, at_most=INT32_MAX),
    Property("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10000,
             "How often the transaction coordinator aborts transactions open longer than their timeout.",
             at_least=1, at_most=INT32_MAX),
    Property("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000,
             "How often the transaction coordinator removes transactional ids past transactional.id.expiration.ms.",
             at_least=1, at_most=INT32_MAX),
    Property("authorizer.class.name", lambda text: _authorizer_class(text), "",
             "The authorizer checking every request against the ACLs (kafka.security.authorizer.AclAuthorizer, "
             "kafka.security.auth.SimpleAclAuthorizer or broker.security.authorizer.AclAuthorizer: all the same "
             "one); empty: no authorization."),
    Property("super.users", lambda text: _principal_list(text), "",
             "Principals allowed everything whatever the ACLs, separated by semicolons: User:admin;User:broker."),
    Property("allow.everyone.if.no.acl.found", _bool, False,
             "With an authorizer, allow a request on a resource no ACL names (false: deny it)."),
    Property("cluster.id", _str, "", "Cluster id given in Metadata (default: generated and kept in the log dir)."),
    Property("metrics.port", _optional_int, None,
             "Serve Prometheus metrics at http://<host.name>:<port>/metrics (0 picks a free port and logs it; "
             "empty: no endpoint).", at_least=0, at_most=65535),
    LOG_LEVEL,
)


def _authorizer_class(text: str) -> str:
    name = text.strip()
    if name and name not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"unknown authorizer {name!r} (one of {', '.join(sorted(AUTHORIZER_CLASS_NAMES))})")
    return name


def _principal_list(text: str) -> str:
    principals = [p.strip() for p in text.split(";") if p.strip()]
    for principal in principals:
        kind, sep, name = principal.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{principal!r} is not a principal: expected Type:name, e.g. User:admin")
    return ";".join(principals)


class KafkaConfig(Config):
    """The broker's validated configuration, indexed by Kafka property name."""

    kind = "broker property"

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        values = dict(values or {})
        self.listener_settings = {name: values.pop(name) for name in list(values) if name.startswith(LISTENER_PREFIX)}
        super().__init__(PROPERTIES, values)
        self.protocol_map = parse_protocol_map(self["listener.security.protocol.map"])
        self.listeners = self._listeners()
        self.inter_broker_listener_name = self._inter_broker_listener_name()
        self._check_advertised()

    def listener_setting(self, listener: str, name: str) -> Any:
        """A setting as ``listener.name.<listener>.<name>`` gives it for ``listener``, else the broker-wide one."""
        value = self.listener_settings.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
        if value is None:
            return self[name]
        prop = next(p for p in PROPERTIES if p.name == name)
        try:
            return prop.parse(value) if isinstance(value, str) else value
        except ValueError as exc:
            raise ConfigError(f"{LISTENER_PREFIX}{listener.lower()}.{name}={value!r}: {exc}") from None

    @property
    def broker_id(self) -> int:
        return self["broker.id"]

    def _listeners(self) -> list[EndPoint]:
        """The listeners to bind: ``listeners``, or one PLAINTEXT listener on host.name and port."""
        if not self["listeners"]:
            return [EndPoint("PLAINTEXT", "PLAINTEXT", self["host.name"], self["port"])]
        endpoints = parse_endpoints(self["listeners"], self.protocol_map)
        if not endpoints:
            raise ConfigError("listeners is empty: give at least one NAME://host:port")
        ports: dict[tuple[str, int], str] = {}
        for endpoint in endpoints:
            taken = ports.setdefault((endpoint.host, endpoint.port), endpoint.listener_name)
            if endpoint.port and taken != endpoint.listener_name:
                raise ConfigError(f"listeners {taken} and {endpoint.listener_name} both use "
                                  f"{endpoint.connection_string}: each listener needs a port of its own")
        return endpoints

    def _inter_broker_listener_name(self) -> str:
        names = [endpoint.listener_name for endpoint in self.listeners]
        name, protocol = self["inter.broker.listener.name"], self["security.inter.broker.protocol"]
        if name and protocol:
            raise ConfigError("give inter.broker.listener.name or security.inter.broker.protocol, not both")
        if protocol:
            if protocol not in self.protocol_map.values() or protocol not in names:
                raise ConfigError(f"security.inter.broker.protocol={protocol} is not among the listeners "
                                  f"({', '.join(names)})")
            return protocol
        if name:
            if name not in names:
                raise ConfigError(f"inter.broker.listener.name={name} is not among the listeners ({', '.join(names)})")
            return name
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]

    def _check_advertised(self) -> None:
        if not self["advertised.listeners"]:
            return
        names = {endpoint.listener_name for endpoint in self.listeners}
        for endpoint in parse_endpoints(self["advertised.listeners"], self.protocol_map, "advertised.listeners"):
            if endpoint.listener_name not in names:
                raise ConfigError(f"advertised.listeners names listener {endpoint.listener_name}, which is not "
                                  "among the listeners")
            if endpoint.host in ("", "0.0.0.0", "::"):
                raise ConfigError(f"advertised.listeners {endpoint}: clients cannot connect to a wildcard or empty "
                                  "host; give the host they use")

    @property
    def listen_address(self) -> tuple[str, int]:
        """(host, port) of the first listener."""
        first = self.listeners[0]
        return first.host or "0.0.0.0", first.port

    @property
    def inter_broker_listener(self) -> EndPoint:
        """The listener other brokers connect to."""
        return next(e for e in self.listeners if e.listener_name == self.inter_broker_listener_name)

    def advertised_listeners(self, bound_ports: Mapping[str, int]) -> list[EndPoint]:
        """What clients and other brokers are told, per listener, once bound: advertised.listeners where it names
        the listener, else its bound address (a wildcard host becomes advertised.host.name or 127.0.0.1)."""
        given = {e.listener_name: e for e in parse_endpoints(self["advertised.listeners"], self.protocol_map,
                                                             "advertised.listeners")}
        fallback_host = self["advertised.host.name"] or "127.0.0.1"
        # Kafka's older settings: without listeners, advertised.host.name is what the one listener advertises.
        legacy = bool(self["advertised.host.name"]) and not self["listeners"]
        advertised = []
        for endpoint in self.listeners:
            wildcard = endpoint.host in ("", "0.0.0.0", "::")
            host = fallback_host if legacy or wildcard else endpoint.host
            bound = EndPoint(endpoint.listener_name, endpoint.security_protocol, host,
                             bound_ports.get(endpoint.listener_name, endpoint.port))
            advertised.append(given.get(endpoint.listener_name, bound))
        return advertised

    def ssl_settings(self) -> SslSettings:
        """The ssl.* properties of the TLS listeners."""
        return SslSettings(keystore=self["ssl.keystore.location"], key_password=self["ssl.key.password"],
                           truststore=self["ssl.truststore.location"], client_auth=self["ssl.client.auth"],
                           enabled_protocols=self["ssl.enabled.protocols"], cipher_suites=self["ssl.cipher.suites"])

    def inter_broker_security(self) -> ClientSecurity:
        """How this broker connects to the others (followers' fetches): the inter-broker listener's protocol; on TLS,
        the truststore as CA and this broker's own certificate when that listener asks for client certificates; on
        SASL, its own login (listener.name.<listener>.<mechanism>.sasl.jaas.config, else sasl.jaas.config)."""
        listener = self.inter_broker_listener
        protocol = listener.security_protocol
        tls = uses_ssl(protocol)
        present_certificate = tls and self["ssl.client.auth"] != "none"
        values = {"security.protocol": protocol, "ssl.ca.location": self["ssl.truststore.location"] if tls else "",
                  "ssl.certificate.location": self["ssl.keystore.location"] if present_certificate else "",
                  "ssl.key.password": self["ssl.key.password"] if present_certificate else "",
                  "ssl.endpoint.identification.algorithm": self["ssl.endpoint.identification.algorithm"]}
        if uses_sasl(protocol):
            mechanism = self["sasl.mechanism.inter.broker.protocol"]
            name = listener.listener_name.lower()
            values.update({"sasl.mechanism": mechanism, "sasl.jaas.config": self.listener_settings.get(
                f"{LISTENER_PREFIX}{name}.{mechanism.lower()}.sasl.jaas.config") or self["sasl.jaas.config"]})
        return ClientSecurity.from_values(values)

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self["log.dirs"] or self["log.dir"]
        return [Path(d.strip()) for d in dirs.split(",") if d.strip()]

    @property
    def retention_ms(self) -> int | None:
        if self["log.retention.ms"] is not None:
            ms = self["log.retention.ms"]
        elif self["log.retention.minutes"] is not None:
            ms = self["log.retention.minutes"] * 60_000
        else:
            ms = self["log.retention.hours"] * 3_600_000
        return None if ms < 0 else ms

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self["authorizer.class.name"])

    @property
    def super_users(self) -> frozenset[str]:
        """The ``super.users`` principals (``User:admin`` ...)."""
        return frozenset(p for p in self["super.users"].split(";") if p)

    def log_config(self) -> LogConfig:
        """The storage layer's settings derived from the broker properties."""
        roll_ms = self["log.roll.ms"]
        retention_bytes = self["log.retention.bytes"]
        return LogConfig(
            segment_bytes=self["log.segment.bytes"],
            segment_ms=roll_ms if roll_ms is not None else self["log.roll.hours"] * 3_600_000,
            index_interval_bytes=self["log.index.interval.bytes"],
            max_index_size=self["log.index.size.max.bytes"],
            flush_interval_messages=self["log.flush.interval.messages"],
            flush_interval_ms=self["log.flush.interval.ms"],
            retention_ms=self.retention_ms,
            retention_bytes=None if retention_bytes < 0 else retention_bytes,
            max_message_bytes=self["message.max.bytes"],
            min_insync_replicas=self["min.insync.replicas"],
            cleanup_policy=parse_cleanup_policy(self["log.cleanup.policy"]),
            min_cleanable_dirty_ratio=self["log.cleaner.min.cleanable.ratio"],
            min_compaction_lag_ms=self["log.cleaner.min.compaction.lag.ms"],
            max_compaction_lag_ms=self["log.cleaner.max.compaction.lag.ms"],
            delete_retention_ms=self["log.cleaner.delete.retention.ms"],
        )


def help_text() -> str:
    """The property table as text, for ``python -m broker --help-config``."""
    return help_table(PROPERTIES)
