"""The runner changes process-wide state (umask, signal handlers, logging level): put it back after each test."""

from __future__ import annotations

import logging
import os
import signal
from typing import Iterator

import pytest


@pytest.fixture(autouse=True)
def process_state() -> Iterator[None]:
    umask = os.umask(0o022)
    os.umask(umask)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    level = logging.getLogger().level
    yield
    os.umask(umask)
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    logging.getLogger().setLevel(level)
