"""The mirror's configuration table: what a properties file (`--config`) or the command line sets.

Sources are named ZooKeeper connect strings (``source.clusters=dc1=zk:2181/dc1,dc2=zk:2181/dc2``): the
consumer groups live in each source's ZooKeeper, as in the paper. A source may instead be given by its
brokers (``source.bootstrap.servers=dc3=host:9092,host:9093``): one mirror process then reads all of its
partitions, with its offsets in a file under ``state.dir`` that only one process may hold. The target is a
ZooKeeper connect string or a broker list. Any producer or consumer property passes through with a ``producer.`` or ``consumer.``
prefix (``producer.compression.codec=lz4``, ``consumer.fetch.message.max.bytes=4194304``); the settings the
mirror's guarantees rest on (acks=all, idempotence, no automatic acknowledgement) cannot be changed.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Mapping

from pipeline.client.consumer_config import (
    CONSUMER_CONNECTOR_CONFIG,
    STATIC_CONNECTOR_CONFIG,
    ConsumerConnectorConfig,
    StaticConnectorConfig,
)
from pipeline.client.producer_config import ProducerConfig
from pipeline.config import (
    INT32_MAX,
    Config,
    ConfigError,
    Property,
    parse_bool,
    parse_float,
    parse_int,
    parse_optional_int,
    parse_regex,
    parse_str,
)
from pipeline.named_clusters import parse_sources
from pipeline.service.settings import LOG_LEVEL
from pipeline.testing_faults import fault_properties
from schemas.events import AUDIT_TOPIC
from schemas.registry_client_settings import REGISTRY_CLIENT_PROPERTIES

__all__ = ["MIRROR_PROPERTIES", "MirrorConfig"]

def _parse_exactly_once(text: str) -> bool:
    """A boolean, or Kafka Connect's spelling of exactly.once.support (enabled / disabled)."""
    spelled = {"enabled": True, "disabled": False}.get(str(text).strip().lower())
    return parse_bool(text) if spelled is None else spelled


def _parse_names(text: str) -> tuple[str, ...]:
    return tuple(sorted({n.strip() for n in text.split(",") if n.strip()}))


MIRROR_PROPERTIES = (
    Property("source.clusters", parse_sources, None,
             "the datacenter clusters to copy from: NAME=ZOOKEEPER[,NAME=ZOOKEEPER...], e.g. dc1=zk:2181/dc1"),
    Property("source.bootstrap.servers", parse_sources, None,
             "source clusters given by their brokers instead: NAME=HOST:PORT[,HOST:PORT...][,NAME=...]; one process "
             "reads all of such a source's partitions, its offsets kept under state.dir"),
    Property("state.dir", parse_str, None,
             "the mirror's own state, owner-only: the quarantine of records the target refuses for good "
             "(STATE/GROUP/quarantine/SOURCE.jsonl) and the offsets of the sources given by brokers "
             "(STATE/GROUP/SOURCE.offsets.json, locked to one process); required with source.bootstrap.servers, and "
             "without it a record the target refuses stops the mirror"),
    Property("target.zookeeper.connect", parse_str, None, "the target (offline) cluster's ZooKeeper"),
    Property("target.bootstrap.servers", parse_str, None, "the target cluster's brokers instead, HOST:PORT[,...]"),
    Property("whitelist", parse_regex, None, "regular expression of the topics to mirror (required)"),
    Property("blacklist", parse_regex, None, "regular expression of topics never mirrored, even if whitelisted"),
    Property("group.id", parse_str, "mirror", "consumer group shared by all mirror processes, in every source"),
    Property("num.streams", parse_int, 1, "consumer streams (threads) per source", at_least=1, at_most=64),
    Property("offset.commit.interval.ms", parse_int, 5000,
             "how often the acknowledged source offsets are committed (with exactly.once, how often a transaction "
             "commits)", at_least=1),
    Property("exactly.once", _parse_exactly_once, False,
             "true: copy each source inside transactions of one transactional producer and keep its offsets in the "
             "target cluster (group GROUP.SOURCE), committed in the same transaction with the audit counts, so that "
             "read_committed readers of the target see every record once whenever the mirror is killed; false: at "
             "least once, offsets in the sources", aliases=("exactly.once.support",)),
    Property("transactional.id.prefix", parse_str, None,
             "with exactly.once, the transactional ids are PREFIX.SOURCE.PROCESS (default prefix: group.id)"),
    Property("process.id", parse_str, None,
             "with exactly.once, this process's name in its transactional ids; must survive a restart (a restart then "
             "fences its predecessor) and differ between the mirror processes of one group (default: the host "
             "name)"),
    Property("topic.config.exclude", _parse_names, ("min.insync.replicas",),
             "topic settings not copied to the target, comma-separated names (by default the target cluster's own "
             "min.insync.replicas applies, as MirrorMaker 2 leaves it: the clusters' sizes differ)"),
    Property("skip.lost.offsets", parse_bool, False,
             "when a source's retention deleted offsets before they were mirrored: false stops with an error "
             "naming the partition and the count; true skips them, counting and reporting each gap"),
    Property("shutdown.timeout.s", parse_float, 30.0,
             "at SIGTERM, longest wait for the records in flight to be acknowledged"),
    Property("metrics.port", parse_optional_int, None,
             "serve Prometheus metrics at http://METRICS.HOST:PORT/metrics (empty: none)", at_least=0, at_most=65535),
    Property("metrics.host", parse_str, "0.0.0.0", "address the metrics server listens on"),
    Property("audit.enable", parse_bool, True, "publish tier-mirror AuditCount records to the target"),
    Property("audit.window.ms", parse_int, 60_000, "audit window of event time", at_least=1),
    Property("audit.topic", parse_str, AUDIT_TOPIC,
             "target topic the AuditCount records go to (records of it mirrored from a source are not counted)"),
    Property("schema.registry.url", parse_str, "http://localhost:8081",
             "schema registry of the AuditCount schema, comma-separated URLs"),
    *REGISTRY_CLIENT_PROPERTIES,
    LOG_LEVEL,
    *fault_properties(drops_events=True),
)

# What the mirror's guarantees rest on: set by the mirror, refused from the user.
_PRODUCER_FIXED = {"producer.type": "async", "request.required.acks": -1, "enable.idempotence": True}
# Set per source by the mirror itself (exactly.once), refused from the user.
_PRODUCER_OWN = ("transactional.id",)
# Retries without end (as Kafka's MirrorMaker sets delivery.timeout.ms): a target down for hours is waited out, the
# source offsets uncommitted meanwhile.
_PRODUCER_DEFAULTS = {"batch.size": 500, "queue.time": 10, "queue.buffering.max.messages": 20_000,
                      "message.send.max.retries": INT32_MAX, "delivery.timeout.ms": INT32_MAX,
                      "retry.backoff.ms": 500, "client.id": "mirror"}
_CONSUMER_FIXED = {"auto.commit.enable": False, "auto.offset.reset": "smallest", "consumer.timeout.ms": 200}
_CONSUMER_FIXED_STATIC = {k: v for k, v in _CONSUMER_FIXED.items() if k != "auto.commit.enable"}
# Property names (aliases included) of each kind of source's consumer.
_CONNECTOR_NAMES = frozenset(n for p in CONSUMER_CONNECTOR_CONFIG for n in (p.name, *p.aliases))
_STATIC_NAMES = frozenset(n for p in STATIC_CONNECTOR_CONFIG for n in (p.name, *p.aliases))
_CONSUMER_DEFAULTS = {"rebalance.backoff.ms": 500, "client.id": "mirror", "fetch.message.max.bytes": 4 << 20}
# A source given by brokers finds new topics and partitions by asking for metadata this often.
_STATIC_DEFAULTS = {"client.id": "mirror", "fetch.message.max.bytes": 4 << 20,
                    "topic.metadata.refresh.interval.ms": 10_000}


class MirrorConfig(Config):
    """Validated mirror settings plus the producer and consumer properties given with their prefixes."""

    kind = "mirror setting"

    def __init__(self, values: Mapping[str, Any] | str | Path | None = None) -> None:
        if isinstance(values, (str, Path)):
            from pipeline.config import read_properties_file
            values = read_properties_file(values)
        own: dict[str, Any] = {}
        producer: dict[str, Any] = {}
        consumer: dict[str, Any] = {}
        for name, value in (values or {}).items():
            for prefix, into in (("producer.", producer), ("consumer.", consumer)):
                if name.startswith(prefix):
                    into[name[len(prefix):]] = value
                    break
            else:
                own[name] = value
        super().__init__(MIRROR_PROPERTIES, own)
        zookeeper_sources = dict(self["source.clusters"] or {})
        broker_sources = dict(self["source.bootstrap.servers"] or {})
        if not zookeeper_sources and not broker_sources:
            raise ConfigError("give at least one source cluster (--source NAME=ZOOKEEPER or "
                              "--source-bootstrap-server NAME=BROKERS)")
        twice = sorted(set(zookeeper_sources) & set(broker_sources))
        if twice:
            raise ConfigError(f"source {twice[0]!r} is given both by its ZooKeeper and by its brokers")
        if broker_sources and not self["state.dir"]:
            raise ConfigError("sources given by brokers keep their offsets in files: give state.dir (--state-dir)")
        #: Source name -> ZooKeeper connect string (the group lives there) / broker list (a static connector).
        self.zookeeper_sources = zookeeper_sources
        self.broker_sources = broker_sources
        if bool(self["target.zookeeper.connect"]) == bool(self["target.bootstrap.servers"]):
            raise ConfigError("give the target cluster once: its ZooKeeper (--target) or its brokers "
                              "(--target-bootstrap-server)")
        if not self["whitelist"]:
            raise ConfigError("give the topics to mirror (--whitelist REGEX)")
        if "/" in self["group.id"]:
            raise ConfigError(f"group.id must not contain '/', got {self['group.id']!r}")
        for name in consumer:
            if name not in _CONNECTOR_NAMES and name not in _STATIC_NAMES:
                raise ConfigError(f"unknown consumer property consumer.{name}")
        for fixed, given, what in ((_PRODUCER_FIXED, producer, "producer"), (_CONSUMER_FIXED, consumer, "consumer")):
            for name in given:
                if name in fixed:
                    raise ConfigError(f"{what}.{name} is set by the mirror (its delivery guarantee rests on it)")
        for name in _PRODUCER_OWN:
            if name in producer:
                raise ConfigError(f"producer.{name} is set by the mirror (exactly.once: transactional.id.prefix and "
                                  f"process.id name it)")
        self.producer_overrides = producer
        self.consumer_overrides = consumer
        # Validated now, so that a bad passed-through property is a start-up error.
        self.producer_config()
        for source in self.sources:
            self.consumer_config(source)

    @property
    def exactly_once(self) -> bool:
        return bool(self["exactly.once"])

    def transactional_id(self, source: str) -> str:
        """The transactional id of this process's producer for ``source`` (exactly.once)."""
        prefix = self["transactional.id.prefix"] or self["group.id"]
        return f"{prefix}.{source}.{self['process.id'] or socket.gethostname()}"

    def target_group(self, source: str) -> str:
        """The group in the target cluster under which ``source``'s offsets are committed (exactly.once)."""
        return f"{self['group.id']}.{source}"

    def transactional_producer_config(self, source: str) -> ProducerConfig:
        """The target producer of one source with exactly.once: the producer_config plus its transactional id."""
        return ProducerConfig({**self.producer_config().as_dict(), "transactional.id": self.transactional_id(source)})

    @property
    def sources(self) -> dict[str, str]:
        """Every source by name: its ZooKeeper connect string or its broker list."""
        return {**self.zookeeper_sources, **self.broker_sources}

    def offsets_file(self, source: str) -> Path:
        """Where the offsets of a source given by brokers are kept."""
        return Path(self["state.dir"]) / self["group.id"] / f"{source}.offsets.json"

    def quarantine_dir(self) -> Path | None:
        """Where records the target refused for good are kept (None without state.dir)."""
        return Path(self["state.dir"]) / self["group.id"] / "quarantine" if self["state.dir"] else None

    def producer_config(self) -> ProducerConfig:
        """The target producer: async, acks=all, idempotent, retrying (practically) forever."""
        where = ({"zookeeper.connect": self["target.zookeeper.connect"]} if self["target.zookeeper.connect"]
                 else {"metadata.broker.list": self["target.bootstrap.servers"]})
        return ProducerConfig({**_PRODUCER_DEFAULTS, **self.producer_overrides, **where, **_PRODUCER_FIXED})

    def consumer_config(self, source: str) -> ConsumerConnectorConfig | StaticConnectorConfig:
        """The consumer connector of one source: the shared group in its ZooKeeper, or (a source given by
        brokers) a static connector over its brokers; offsets committed by the mirror only. Passed-through
        consumer properties apply to the kind of source whose table has them."""
        if source in self.broker_sources:
            overrides = {k: v for k, v in self.consumer_overrides.items() if k in _STATIC_NAMES}
            return StaticConnectorConfig({**_STATIC_DEFAULTS, **overrides, **_CONSUMER_FIXED_STATIC,
                                          "metadata.broker.list": self.broker_sources[source]})
        overrides = {k: v for k, v in self.consumer_overrides.items() if k in _CONNECTOR_NAMES}
        settings = {**_CONSUMER_DEFAULTS, **overrides, **_CONSUMER_FIXED,
                    "zookeeper.connect": self.zookeeper_sources[source], "group.id": self["group.id"]}
        return ConsumerConnectorConfig(settings)
