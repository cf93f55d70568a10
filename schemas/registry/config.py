"""The registry's settings: a properties file (`--config`) and the command line set the same table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pipeline.config import Config, ConfigError, Property, parse_str
from pipeline.service.settings import LOG_LEVEL
from pipeline.zk.security import ZOOKEEPER_SECURITY_PROPERTIES, ZooKeeperSecurity

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
