"""Free loopback TCP ports for test processes."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now (the OS picks it; callers bind soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def consecutive_free_ports(count: int, host: str = "127.0.0.1", low: int = 20000, high: int = 32000) -> int:
    """The first of ``count`` consecutive ports on ``host`` nothing listens on now, below the ephemeral range (so
    that no client connection of another test takes one of them meanwhile)."""
    import random

    for _ in range(200):
        first = random.randrange(low, high - count)
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((host, port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found between {low} and {high}")
