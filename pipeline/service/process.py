"""What every `python -m <service>` does to its process at start: write its files for its owner only, and log to
stderr in one format."""

from __future__ import annotations

import logging
import os
import sys
from typing import Iterable

__all__ = ["LOG_FORMAT", "OWNER_ONLY_UMASK", "log_to_stderr", "write_owner_only"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Group and others get no permission on what the process creates: files 0600, directories 0700.
OWNER_ONLY_UMASK = 0o077


def write_owner_only() -> int:
    """Make every file and directory the process (and its children) creates from now on its owner's only: a
    service's state, logs and data hold the events and their metadata. The previous umask."""
    return os.umask(OWNER_ONLY_UMASK)


def log_to_stderr(level: int | str = logging.INFO, quiet: Iterable[str] = ("kazoo", "httpx")) -> None:
    """Log at ``level`` to stderr (called again: only the level changes); the libraries in ``quiet`` (every
    ZooKeeper session, every HTTP request they make) only from WARNING."""
    level = level.upper() if isinstance(level, str) else level
    logging.basicConfig(level=level, stream=sys.stderr, format=LOG_FORMAT)
    logging.getLogger().setLevel(level)
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)
