"""The audit service's settings: the clusters it reads, its windows, grace and threshold, where it keeps state, and
how it connects to the brokers (the client security settings, the same for every cluster it reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pipeline.config import Config, ConfigError, Property, parse_int, parse_optional_int, parse_regex, parse_str
from pipeline.named_clusters import parse_sources
from pipeline.security.client_settings import SECURITY_PROPERTIES, ClientSecurity
from pipeline.security.http_settings import HttpSecurity, http_security_properties
from pipeline.service.settings import LOG_LEVEL
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS
from schemas.registry_client_settings import REGISTRY_CLIENT_PROPERTIES

__all__ = ["AUDIT_PROPERTIES", "AuditConfig"]


def _parse_ratio(text: str) -> float:
    value = float(text.strip())
    if not 0 < value <= 1:
        raise ValueError(f"expected a ratio in (0, 1], got {text!r}")
    return value


AUDIT_PROPERTIES = (
    Property("datacenters", parse_sources, None,
             "the datacenter clusters by their ZooKeeper: NAME=HOST:PORT[/CHROOT][,NAME=...] (the names are the "
             "events' header.datacenter)"),
    Property("offline.zookeeper.connect", parse_str, None, "the offline cluster's ZooKeeper"),
    Property("topics", parse_regex, "|".join(sorted(EVENT_TOPICS)), "regular expression of the event topics audited"),
    Property("audit.topic", parse_str, AUDIT_TOPIC, "topic the tiers publish their AuditCount records to"),
    Property("window.ms", parse_int, 60_000, "window of event time; the tiers must count with the same",
             at_least=1),
    Property("grace.ms", parse_int, 120_000,
             "a window is reconciled this long after it ended (late data reopens it)", at_least=0),
    Property("completeness.threshold", _parse_ratio, 0.999,
             "completeness below which a reconciled window counts as incomplete (for alerts)"),
    Property("retain.ms", parse_int, 6 * 3_600_000, "windows kept (counts, sketches, results) this long",
             at_least=60_000),
    Property("state.dir", parse_str, None, "where the counts, offsets and reconciliation results are kept (required)"),
    Property("checkpoint.interval.ms", parse_int, 5000, "how often counts and offsets are written", at_least=100),
    Property("reconcile.interval.ms", parse_int, 5000, "how often closed windows are reconciled", at_least=100),
    Property("http.host", parse_str, "0.0.0.0",
             "address the audit's HTTP API, dashboard and Prometheus /metrics listen on (0.0.0.0: every interface)"),
    Property("http.port", parse_optional_int, 8090,
             "port of the audit's HTTP API, dashboard and Prometheus /metrics (HTTPS when http.ssl.keystore.location "
             "is set)", at_least=0, at_most=65535),
    *http_security_properties("http.", realm="Audit"),
    Property("mirror.group", parse_str, "mirror",
             "the mirror's consumer group in each datacenter's ZooKeeper: a window is compared at the mirror and "
             "offline tiers only once that group committed past it (empty: no mirror is followed, those tiers are "
             "compared once the window's grace passed)"),
    Property("warehouse.dir", parse_str, None,
             "the ETL's warehouse: the dashboard shows its run history (empty: none)"),
    Property("etl.group", parse_str, "etl", "the ETL group whose run history the dashboard shows"),
    Property("prometheus.url", parse_str, "http://localhost:9090",
             "the Prometheus server the dashboard reads alerts, lag, latency and ETL runs from"),
    Property("schema.registry.url", parse_str, "http://localhost:8081", "schema registry of the AuditCount schema"),
    *REGISTRY_CLIENT_PROPERTIES,
    LOG_LEVEL,
    *SECURITY_PROPERTIES,
)


class AuditConfig(Config):
    """Validated audit service settings."""

    kind = "audit setting"

    def __init__(self, values: Mapping[str, Any] | str | Path | None = None) -> None:
        super().__init__(AUDIT_PROPERTIES, values)
        if not self["datacenters"] and not self["offline.zookeeper.connect"]:
            raise ConfigError("give the clusters to audit: --datacenter NAME=ZOOKEEPER and/or --offline ZOOKEEPER")
        if not self["state.dir"]:
            raise ConfigError("give the audit's state directory (--state-dir DIR)")
        #: How every reader, scan and lag sample connects to the brokers.
        self.security = ClientSecurity.from_values(self.as_dict())
        self.http_security = HttpSecurity.from_config(self, "http.")

    @property
    def state_dir(self) -> Path:
        return Path(self["state.dir"])
