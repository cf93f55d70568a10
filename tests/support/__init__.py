"""Test harness shared by integration tests: broker processes, free ports, polling, raw wire access, clients."""

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
