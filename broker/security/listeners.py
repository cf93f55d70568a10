"""Listeners as Kafka names them: ``NAME://host:port`` endpoints, the name -> security protocol map, and the checks
Kafka's KafkaConfig makes on them.

A listener's name is its security protocol (``SSL://...``) unless ``listener.security.protocol.map`` maps a
custom name (``INTERNAL:SASL_SSL``). ``parse_endpoints`` turns ``listeners`` or ``advertised.listeners`` into
:class:`EndPoint` values, refusing a name used twice, an unknown protocol or a malformed address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.config import ConfigError, Property, parse_str
from pipeline.security.client_settings import SECURITY_PROTOCOLS

__all__ = ["EndPoint", "DEFAULT_PROTOCOL_MAP", "LISTENER_PROPERTIES", "parse_protocol_map", "parse_endpoints",
           "uses_ssl", "uses_sasl"]

LISTENER_PROPERTIES: tuple[Property, ...] = (
    Property("listeners", parse_str, "",
             "Comma-separated NAME://host:port endpoints to listen on (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL or a "
             "name of listener.security.protocol.map; port 0 picks a free one); overrides host.name and port."),
    Property("advertised.listeners", parse_str, "",
             "The endpoints given to clients and other brokers, NAME://host:port per listener (default: listeners, "
             "with advertised.host.name or 127.0.0.1 for a wildcard host and the bound port for port 0)."),
    Property("listener.security.protocol.map", parse_str, "",
             "NAME:PROTOCOL pairs naming custom listeners (e.g. INTERNAL:SASL_SSL,EXTERNAL:SSL); each security "
             "protocol also names itself."),
    Property("inter.broker.listener.name", lambda text: text.strip().upper(), "",
             "The listener other brokers connect to (followers' fetches); default PLAINTEXT when listed, else the "
             "first listener."),
    Property("security.inter.broker.protocol", lambda text: text.strip().upper(), "",
             "Kafka's older way to name the inter-broker listener: the listener of that name (PLAINTEXT, SSL, "
             "SASL_PLAINTEXT or SASL_SSL); give this or inter.broker.listener.name, not both."),
)

# Kafka's default listener.security.protocol.map: every protocol names itself.
DEFAULT_PROTOCOL_MAP: dict[str, str] = {protocol: protocol for protocol in SECURITY_PROTOCOLS}

_ENDPOINT = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)")


def uses_ssl(protocol: str) -> bool:
    """Whether connections of ``protocol`` speak TLS."""
    return protocol in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    """Whether connections of ``protocol`` authenticate with SASL first."""
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class EndPoint:
    """One listener: its name, security protocol and address (host "" binds every interface)."""

    listener_name: str
    security_protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @property
    def connection_string(self) -> str:
        """``host:port`` as a client dials it."""
        return str(self).partition("://")[2]


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map`` (``INTERNAL:SASL_SSL,EXTERNAL:SSL``) over Kafka's default (each protocol
    names itself)."""
    mapping = dict(DEFAULT_PROTOCOL_MAP)
    custom: set[str] = set()
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map entry {entry!r}: expected NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map entry {entry!r}: unknown security protocol "
                              f"{protocol!r} (expected one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in custom:
            raise ConfigError(f"listener.security.protocol.map names listener {name} twice")
        custom.add(name)
        mapping[name] = protocol
    return mapping


def parse_endpoints(text: str, protocol_map: dict[str, str], setting: str = "listeners") -> list[EndPoint]:
    """The endpoints of ``listeners`` (or ``advertised.listeners``): each ``NAME://host:port``, names unique and
    known to ``protocol_map``."""
    endpoints: list[EndPoint] = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        match = _ENDPOINT.fullmatch(entry)
        if match is None:
            raise ConfigError(f"{setting} entry {entry!r}: expected NAME://host:port, e.g. SSL://127.0.0.1:9093")
        name = match["name"].upper()
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ConfigError(f"{setting} entry {entry!r}: listener {name} is neither a security protocol "
                              f"({', '.join(SECURITY_PROTOCOLS)}) nor named in listener.security.protocol.map")
        port = int(match["port"])
        if port > 65535:
            raise ConfigError(f"{setting} entry {entry!r}: port {port} is out of range")
        if any(e.listener_name == name for e in endpoints):
            raise ConfigError(f"{setting} names listener {name} twice: each listener name must be unique")
        endpoints.append(EndPoint(name, protocol, match["host"].strip("[]"), port))
    return endpoints
