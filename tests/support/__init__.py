"""Helpers shared by the tests and the benchmarks: the process harness (process.py) and the wrappers built on it
(broker, registry, mirror, audit, etl, prometheus, stock group members), free ports, polling, raw wire access,
clients."""

from .broker import BrokerError, BrokerProcess, CLEAN_SHUTDOWN_MARKER, REPO_ROOT, rss_bytes
from .polling import WaitTimeout, wait_until
from .ports import free_port

__all__ = [
    "BrokerError",
    "BrokerProcess",
    "CLEAN_SHUTDOWN_MARKER",
    "REPO_ROOT",
    "WaitTimeout",
    "free_port",
    "rss_bytes",
    "wait_until",
]
