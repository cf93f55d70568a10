"""Which addresses a TCP port is listened on, from /proc/net/tcp and /proc/net/tcp6 (Linux), for tests that check
that a server binds only the host it was given."""

from __future__ import annotations

import ipaddress
import socket
import struct
from pathlib import Path

__all__ = ["listening_addresses"]

_LISTEN = "0A"


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(hex_address, 16)))
    # IPv6: four 32-bit words, each in host (little-endian) order.
    words = struct.unpack("<4I", raw)
    return str(ipaddress.IPv6Address(struct.pack(">4I", *words)))


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on TCP ``port`` (in this network namespace)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, _, hex_port = local.partition(":")
            if state == _LISTEN and int(hex_port, 16) == port:
                found.add(_address(address))
    return found
