"""SIGTERM and SIGINT ask a service to stop cleanly (and exit 0): one threaded and one asyncio copy of the
handling, for every service."""

from __future__ import annotations

import asyncio
import signal
import threading

__all__ = ["STOP_SIGNALS", "stop_on_signals", "stop_on_signals_async"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (the main thread's handlers), for a threaded service to finish."""
    stop = threading.Event()
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: stop.set())
    return stop


def stop_on_signals_async() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT, for an asyncio service; call it inside the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    return stop
