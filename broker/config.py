"""Broker configuration: Kafka's server.properties names, declared once as a table, parsed and validated.

Every property the broker understands is one row of ``PROPERTIES``: its Kafka name, type, default and
meaning. A properties file and ``--override key=value`` pairs are read into a :class:`KafkaConfig`, which
exposes values by Kafka name (``config["log.segment.bytes"]``) and derives the settings the layers below
need (listener address, log directories, :class:`~broker.log.log_config.LogConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from broker.log.log_config import LogConfig


class ConfigError(ValueError):
    """A property that is unknown, malformed or out of range."""


@dataclass(frozen=True)
class Property:
    """One broker property: its Kafka name, how to parse it, its default and what it does."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _optional_int(text: str) -> int | None:
    text = text.strip()
    return None if text == "" else int(text)


def _str(text: str) -> str:
    return text.strip()


MiB = 1024 * 1024

PROPERTIES: tuple[Property, ...] = (
    Property("broker.id", int, 0, "This broker's id within its cluster."),
    Property("listeners", _str, "", "PLAINTEXT://host:port to listen on; overrides host.name and port."),
    Property("host.name", _str, "127.0.0.1", "Address to bind when listeners is not set."),
    Property("port", int, 9092, "TCP port to listen on when listeners is not set (0 picks a free one)."),
    Property("advertised.host.name", _str, "", "Host given to clients in Metadata (default: the bound host)."),
    Property("log.dirs", _str, "", "Comma-separated directories holding the partition logs."),
    Property("log.dir", _str, "/tmp/kafka-logs", "The log directory when log.dirs is not set."),
    Property("num.partitions", int, 1, "Partitions of a topic created automatically or without a count."),
    Property("auto.create.topics.enable", _bool, True, "Create a topic when a client asks for an unknown one."),
    Property("default.replication.factor", int, 1, "Replication factor of automatically created topics."),
    Property("log.segment.bytes", int, 1024 * MiB, "Roll a new segment when the active one reaches this size."),
    Property("log.roll.ms", _optional_int, None, "Roll a new segment after this age (overrides log.roll.hours)."),
    Property("log.roll.hours", int, 168, "Roll a new segment after this many hours."),
    Property("log.index.interval.bytes", int, 4096, "Bytes of log between two entries of the sparse index."),
    Property("log.index.size.max.bytes", int, 10 * MiB, "Largest offset index file; a full index rolls the segment."),
    Property("log.flush.interval.messages", _optional_int, None, "fsync a log after this many messages (unset: page cache)."),
    Property("log.flush.interval.ms", _optional_int, None, "fsync a log when its oldest unflushed message is this old."),
    Property("log.flush.scheduler.interval.ms", int, 1000, "How often the time-based flush policy is checked."),
    Property("log.flush.offset.checkpoint.interval.ms", int, 60000, "How often recovery points are checkpointed."),
    Property("log.retention.ms", _optional_int, None, "Delete segments older than this (overrides minutes and hours; -1: keep)."),
    Property("log.retention.minutes", _optional_int, None, "Delete segments older than this many minutes."),
    Property("log.retention.hours", int, 168, "Delete segments older than this many hours."),
    Property("log.retention.bytes", int, -1, "Delete oldest segments while a partition is larger than this (-1: no limit)."),
    Property("log.retention.check.interval.ms", int, 300000, "How often retention is enforced."),
    Property("message.max.bytes", int, 1048588, "Largest record batch the broker accepts."),
    Property("socket.request.max.bytes", int, 100 * MiB, "Largest request frame; a larger one closes the connection."),
    Property("fetch.max.wait.cap.ms", int, 30000, "Upper bound on a Fetch request's max_wait_ms."),
    Property("zookeeper.connect", _str, "", "ZooKeeper connect string with chroot; empty runs standalone."),
    Property("cluster.id", _str, "", "Cluster id given in Metadata (default: generated and kept in the log dir)."),
)

_BY_NAME: dict[str, Property] = {p.name: p for p in PROPERTIES}


def read_properties_file(path: str | Path) -> dict[str, str]:
    """Parse a Java-style properties file (key=value or key: value, # and ! comments)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        values[line[:sep].strip()] = line[sep + 1 :].strip()
    return values


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """Turn ``key=value`` strings from the command line into a dict."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r} is not of the form key=value")
        values[key.strip()] = value
    return values


class KafkaConfig:
    """The broker's validated configuration, indexed by Kafka property name."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values: dict[str, Any] = {p.name: p.default for p in PROPERTIES}
        for name, text in (values or {}).items():
            prop = _BY_NAME.get(name)
            if prop is None:
                raise ConfigError(f"unknown broker property {name!r}")
            try:
                self._values[name] = prop.parse(str(text))
            except ValueError as exc:
                raise ConfigError(f"property {name}={text!r}: {exc}") from None
        self._validate()

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def _validate(self) -> None:
        positive = ("log.segment.bytes", "message.max.bytes", "socket.request.max.bytes", "num.partitions",
                    "log.index.interval.bytes", "log.retention.check.interval.ms", "log.flush.scheduler.interval.ms")
        for name in positive:
            if self._values[name] <= 0:
                raise ConfigError(f"property {name} must be positive, got {self._values[name]}")
        if not 0 <= self._values["port"] <= 65535:
            raise ConfigError(f"property port must be within 0..65535, got {self._values['port']}")

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

    @property
    def listen_address(self) -> tuple[str, int]:
        """(host, port) from listeners (PLAINTEXT://host:port) or host.name and port."""
        listeners = self._values["listeners"]
        if listeners:
            first = listeners.split(",")[0].strip()
            _, _, address = first.rpartition("://")
            host, sep, port = address.rpartition(":")
            if not sep:
                raise ConfigError(f"listeners={listeners!r}: expected PLAINTEXT://host:port")
            return host or "0.0.0.0", int(port)
        return self._values["host.name"], self._values["port"]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self._values["log.dirs"] or self._values["log.dir"]
        return [Path(d.strip()) for d in dirs.split(",") if d.strip()]

    @property
    def retention_ms(self) -> int | None:
        if self._values["log.retention.ms"] is not None:
            ms = self._values["log.retention.ms"]
        elif self._values["log.retention.minutes"] is not None:
            ms = self._values["log.retention.minutes"] * 60_000
        else:
            ms = self._values["log.retention.hours"] * 3_600_000
        return None if ms < 0 else ms

    def log_config(self) -> LogConfig:
        """The storage layer's settings derived from the broker properties."""
        roll_ms = self._values["log.roll.ms"]
        retention_bytes = self._values["log.retention.bytes"]
        return LogConfig(
            segment_bytes=self._values["log.segment.bytes"],
            segment_ms=roll_ms if roll_ms is not None else self._values["log.roll.hours"] * 3_600_000,
            index_interval_bytes=self._values["log.index.interval.bytes"],
            max_index_size=self._values["log.index.size.max.bytes"],
            flush_interval_messages=self._values["log.flush.interval.messages"],
            flush_interval_ms=self._values["log.flush.interval.ms"],
            retention_ms=self.retention_ms,
            retention_bytes=None if retention_bytes < 0 else retention_bytes,
            max_message_bytes=self._values["message.max.bytes"],
        )

    def describe(self) -> str:
        """Every property with its current value, for start-up logs and --help-config."""
        return "\n".join(f"{p.name}={self._values[p.name]}" for p in PROPERTIES)


def help_text() -> str:
    """The property table as text, for ``python -m broker --help-config``."""
    width = max(len(p.name) for p in PROPERTIES)
    return "\n".join(f"{p.name:<{width}}  default {p.default!s:<12} {p.doc}" for p in PROPERTIES)
