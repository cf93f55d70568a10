"""What every `python -m <service>` does at start: log to stderr, and stop on SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Iterable

__all__ = ["log_to_stderr", "stop_on_signals"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to_stderr(level: int | str = logging.INFO, quiet: Iterable[str] = ("kazoo", "httpx")) -> None:
    """Log at ``level`` to stderr; the libraries in ``quiet`` (every ZooKeeper session, every HTTP request
    they make) only from WARNING."""
    logging.basicConfig(level=level, stream=sys.stderr, format=LOG_FORMAT)
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (the main thread's handlers), for a service to finish and exit 0."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
