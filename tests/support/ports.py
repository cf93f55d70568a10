"""Free loopback TCP ports for test processes.

A port is chosen here and bound later by a child process, sometimes seconds later (a broker, a ZooKeeper JVM, a
whole deployment). Three rules keep two of them from ever meeting on one port:

- ports come from below the kernel's ephemeral range, so no client connection of any test takes one as its
  source port meanwhile (the OS's own pick, ``bind(port 0)``, is in that range);
- each pytest-xdist worker takes from a slice of its own, so two workers never choose the same one;
- one process never hands out the same port twice (until its whole slice is used up), whether or not the
  first taker has bound it yet.
"""

from __future__ import annotations

import os
import random
import socket
import threading

__all__ = ["consecutive_free_ports", "free_port", "port_range"]

LOW = 20000
HIGH = 32000


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_range(worker: str | None = None, workers: str | None = None) -> range:
    """The ports this process takes from: its xdist worker's share of LOW..HIGH (or of LOW..the ephemeral
    range's start, when that begins lower)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0") if worker is None else worker
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") if workers is None else workers
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    count = max(int(workers) if workers.isdigit() else 1, 1)
    high = HIGH
    ephemeral = _ephemeral_start()
    if LOW + 2000 <= ephemeral < HIGH:
        high = ephemeral
    width = (high - LOW) // count
    start = LOW + (index % count) * width
    return range(start, start + width)


class _PortAllocator:
    """Hands out runs of ports from :func:`port_range`, each port once, starting at a random place in it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: int | None = None

    def take(self, count: int, host: str) -> int:
        ports = port_range()
        if count > len(ports):
            raise RuntimeError(f"{count} consecutive ports do not fit {ports.start}..{ports.stop - 1}")
        with self._lock:
            if self._next is None or self._next not in ports:
                self._next = random.randrange(ports.start, ports.stop)
            for _ in range(len(ports)):
                first = self._next
                if first + count > ports.stop:
                    first = ports.start
                self._next = first + count
                if all(_bindable(host, port) for port in range(first, first + count)):
                    return first
        raise RuntimeError(f"no {count} consecutive free ports on {host} in {ports.start}..{ports.stop - 1}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


_ALLOCATOR = _PortAllocator()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now and that no other caller in this test session
    was given (callers bind it soon after)."""
    return _ALLOCATOR.take(1, host)


def consecutive_free_ports(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive such ports."""
    return _ALLOCATOR.take(count, host)
