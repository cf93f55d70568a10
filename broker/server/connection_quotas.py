"""ConnectionQuotas: Kafka's ``max.connections``, ``max.connections.per.ip`` and its per-address overrides.

The socket server asks :meth:`try_open` right after accepting; a refused connection is closed at once.
Every opened connection is given back with :meth:`close`.
"""

from __future__ import annotations

import socket

from pipeline.config import ConfigError


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's max.connections.per.ip.overrides) as {ip address: count}.

    Host names are resolved once, here, as Kafka does when it reads the setting.
    """
    overrides: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not (count.strip().isascii() and count.strip().isdigit()):
            raise ConfigError(f"max.connections.per.ip.overrides entry {entry!r}: expected host:count")
        try:
            address = socket.gethostbyname(host.strip("[] "))
        except OSError as exc:
            raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}") from None
        overrides[address] = int(count)
    return overrides


class ConnectionQuotas:
    """Open connections in total and per client address, against their limits."""

    def __init__(self, max_connections: int, max_per_ip: int, per_ip_overrides: dict[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def try_open(self, address: str) -> str | None:
        """Count a new connection from ``address``; if a limit refuses it, count nothing and return why."""
        if self.total >= self.max_connections:
            return f"the broker already has the configured maximum of {self.max_connections} connections"
        count = self._per_ip.get(address, 0)
        limit = self.per_ip_overrides.get(address, self.max_per_ip)
        if count >= limit:
            return f"{address} already has the configured maximum of {limit} connections"
        self.total += 1
        self._per_ip[address] = count + 1
        return None

    @property
    def at_max_connections(self) -> bool:
        return self.total >= self.max_connections

    def count(self, address: str) -> int:
        """Open connections from ``address``."""
        return self._per_ip.get(address, 0)

    def busiest_address(self) -> str | None:
        """The address holding the most connections (None when there are none)."""
        return max(self._per_ip, key=self._per_ip.__getitem__, default=None)

    def close(self, address: str) -> None:
        """Forget one connection counted by :meth:`try_open`."""
        self.total -= 1
        count = self._per_ip[address] - 1
        if count:
            self._per_ip[address] = count
        else:
            del self._per_ip[address]
