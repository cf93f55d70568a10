"""The emulators' configuration table: what a properties file (`--config`) or the command line sets.

Producer settings (batching, compression, acknowledgements) and the client security settings (security.protocol,
sasl.*, ssl.*) use the Producer's own names and are passed to it, and to the AuditCount publisher, as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pipeline.client.producer_config import parse_acks
from pipeline.config import Config, ConfigError, Property, parse_bool, parse_optional_int, parse_str
from pipeline.security.client_settings import SECURITY_PROPERTIES, ClientSecurity, security_settings
from pipeline.service.settings import LOG_LEVEL
from schemas.events import AUDIT_TOPIC
from schemas.registry_client_settings import REGISTRY_CLIENT_PROPERTIES

__all__ = ["EMULATOR_PROPERTIES", "EmulatorConfig", "PRODUCER_SETTINGS"]


def _parse_float(text: str) -> float:
    return float(text.strip())


def _parse_optional_float(text: str) -> float | None:
    text = text.strip()
    return None if text == "" else float(text)


def _parse_int(text: str) -> int:
    return int(text.strip())


EMULATOR_PROPERTIES = (
    Property("datacenter", parse_str, "dc1", "datacenter the emulated servers are in (event headers, audit)"),
    Property("bootstrap.servers", parse_str, None, "brokers of the local datacenter cluster, host:port[,...]",
             aliases=("metadata.broker.list",)),
    Property("zookeeper.connect", parse_str, None,
             "find the local cluster's brokers in its ZooKeeper registry (host:port[,...]/chroot) instead"),
    Property("schema.registry.url", parse_str, "http://localhost:8081",
             "schema registry URL(s), comma-separated"),
    *REGISTRY_CLIENT_PROPERTIES,
    Property("servers", _parse_int, 10, "frontend servers to emulate", at_least=1, at_most=10_000),
    Property("rate", _parse_float, 1000.0, "events per second, all servers together"),
    Property("duration.s", _parse_optional_float, None, "stop after this many seconds (empty: run until SIGTERM)"),
    Property("seed", _parse_int, 0, "seed of everything random: the same seed, the same events"),
    Property("members", _parse_int, 1_000_000, "members of the site", at_least=2),
    Property("zipf.exponent", _parse_float, 1.1, "skew of member popularity (Zipf exponent)"),
    Property("service", parse_str, "frontend", "service the servers run (event headers, audit application)"),
    Property("system.metrics.interval.ms", _parse_int, 10_000, "a SystemMetricsEvent per host this often",
             at_least=1),
    Property("audit.window.ms", _parse_int, 60_000, "audit window of event time", at_least=1),
    Property("audit.settle.ms", _parse_int, 5_000,
             "a window's count is published this long after it ended even with events still in flight (being "
             "retried, up to delivery.timeout.ms), as a count of what settled and what is still unsettled; what "
             "settles later follows in further counts, and the audit holds the window pending meanwhile", at_least=0),
    Property("audit.topic", parse_str, AUDIT_TOPIC, "topic the AuditCount records go to"),
    Property("metrics.port", parse_optional_int, None,
             "serve Prometheus metrics at http://METRICS.HOST:PORT/metrics (empty: none)", at_least=0, at_most=65535),
    Property("metrics.host", parse_str, "0.0.0.0", "address the metrics server listens on"),
    Property("created.log", parse_str, "",
             "append one line per created event, <eventId> <topic> <eventTime ms>, to this file (written out at "
             "least every audit window and at exit; empty: none)"),
    Property("compression.codec", parse_str, "lz4", "producer compression"),
    Property("batch.size", _parse_int, 500, "producer: messages per batch", at_least=1),
    Property("queue.time", _parse_int, 50, "producer: longest wait in ms for a batch to fill", at_least=0),
    Property("queue.buffering.max.messages", _parse_int, 100_000, "producer: most messages queued", at_least=1),
    Property("request.required.acks", parse_acks, -1, "producer acknowledgements: 1, or -1 (all)"),
    Property("enable.idempotence", parse_bool, True,
             "producer: idempotent, so that a retried batch is stored once (needs request.required.acks=-1)"),
    Property("delivery.timeout.ms", _parse_int, 120_000,
             "producer: an event not acknowledged this long after it was created fails for good (retriable errors, "
             "a broker bounce or a leader election, are retried until then)", at_least=1),
    Property("shutdown.timeout.s", _parse_float, 30.0, "at SIGTERM, longest wait for queued events to be sent"),
    LOG_LEVEL,
    *SECURITY_PROPERTIES,
)

PRODUCER_SETTINGS = ("compression.codec", "batch.size", "queue.time", "queue.buffering.max.messages",
                     "request.required.acks", "enable.idempotence", "delivery.timeout.ms")
"""Settings passed to the event Producer under the same names."""


class EmulatorConfig(Config):
    """Validated emulator settings; one of bootstrap.servers and zookeeper.connect is required."""

    kind = "emulator setting"

    def __init__(self, values: Mapping[str, Any] | str | Path | None = None) -> None:
        super().__init__(EMULATOR_PROPERTIES, values)
        if bool(self["bootstrap.servers"]) == bool(self["zookeeper.connect"]):
            raise ConfigError("give either bootstrap.servers (--bootstrap-server) or zookeeper.connect (--zookeeper)")
        if self["rate"] <= 0:
            raise ConfigError(f"rate must be positive, got {self['rate']}")
        if self["request.required.acks"] == 0:
            raise ConfigError("request.required.acks=0 cannot be audited: nothing says what the broker stored")
        if self["enable.idempotence"] and self["request.required.acks"] != -1:
            raise ConfigError(f"enable.idempotence=true needs request.required.acks=-1 (all), got "
                              f"{self['request.required.acks']}; set enable.idempotence=false to use it")
        self.security = ClientSecurity.from_values(self.as_dict())

    def producer_config(self) -> dict[str, Any]:
        """The event Producer's settings (async, keyed sends)."""
        where = ({"zookeeper.connect": self["zookeeper.connect"]} if self["zookeeper.connect"]
                 else {"metadata.broker.list": self["bootstrap.servers"]})
        return {**where, "producer.type": "async", "client.id": f"{self['service']}-{self['datacenter']}",
                **{name: self[name] for name in PRODUCER_SETTINGS}, **security_settings(self)}
