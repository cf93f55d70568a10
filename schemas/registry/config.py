"""The registry's settings: a properties file (`--config`) and the command line set the same table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pipeline.config import Config, ConfigError, Property, parse_str
from pipeline.security.http_settings import HttpSecurity, Listener, Names, http_security_properties, parse_listeners
from pipeline.service.settings import LOG_LEVEL
from pipeline.zk.security import ZOOKEEPER_SECURITY_PROPERTIES, ZooKeeperSecurity

from .access import ACCESS_PROPERTIES

__all__ = ["REGISTRY_PROPERTIES", "RegistryConfig"]


def _parse_float(text: str) -> float:
    return float(text.strip())


REGISTRY_PROPERTIES = (
    Property("zookeeper.connect", parse_str, None,
             "keep the state in ZooKeeper (host:port[,...]/chroot), shared by every instance on that chroot"),
    Property("data.dir", parse_str, "var/schema-registry",
             "standalone (no zookeeper.connect): keep the state in this local directory"),
    Property("host", parse_str, "0.0.0.0", "address to listen on"),
    Property("port", int, 8081, "port to listen on", at_least=0, at_most=65535),
    Property("zookeeper.timeout.s", _parse_float, 10.0, "deadline of every ZooKeeper call"),
    *ZOOKEEPER_SECURITY_PROPERTIES,
    Property("listeners", parse_listeners, Names(),
             "where to listen, comma-separated http://HOST:PORT or https://HOST:PORT (empty: http on host:port)"),
    *http_security_properties(realm="SchemaRegistry"),
    *ACCESS_PROPERTIES,
    LOG_LEVEL,
)


class RegistryConfig(Config):
    """Validated registry settings."""

    kind = "registry setting"

    def __init__(self, values: Mapping[str, Any] | str | Path | None = None) -> None:
        super().__init__(REGISTRY_PROPERTIES, values)
        if self["zookeeper.timeout.s"] <= 0:
            raise ConfigError(f"zookeeper.timeout.s must be positive, got {self['zookeeper.timeout.s']}")
        #: How its ZooKeeper session authenticates and protects the schemas it stores.
        self.zookeeper_security = ZooKeeperSecurity.from_values(self.as_dict())
        self.security = HttpSecurity.from_config(self)
        if any(listener.scheme == "https" for listener in self["listeners"]) and not self.security.keystore:
            raise ConfigError("an https listener needs ssl.keystore.location (PEM: certificate chain and key)")

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """The listeners, or http on host:port without any."""
        return self["listeners"] or (Listener("http", self["host"], self["port"]),)
