"""A progress counter on stderr for long runs, shown only when stderr is a terminal.

A background thread rewrites one line (``\\r``) a few times a second from a counter the worker bumps;
the worker never formats or writes anything itself, so the hot loop pays one attribute increment.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    """``with Progress("produced") as progress: ... progress.count += n`` -- a live counter line on a tty."""

    def __init__(self, label: str, *, stream: TextIO | None = None, interval_s: float = 0.25,
                 enabled: bool | None = None) -> None:
        self.label = label
        self.count = 0
        self._stream = stream if stream is not None else sys.stderr
        self._interval_s = interval_s
        self._enabled = self._stream.isatty() if enabled is None else enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()
        self._shown = False

    def __enter__(self) -> "Progress":
        self._started = time.monotonic()
        if self._enabled:
            self._thread = threading.Thread(target=self._run, name="cli-progress", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._show()

    def _show(self) -> None:
        elapsed = time.monotonic() - self._started
        rate = self.count / elapsed if elapsed > 0 else 0.0
        self._stream.write(f"\r{self.label} {self.count:,} messages ({rate:,.0f} msg/s)\x1b[K")
        self._stream.flush()
        self._shown = True

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()


class Throttle:
    """Hold a loop to ``rate`` operations per second (kafka-producer-perf-test's --throughput).

    ``wait(done)`` sleeps just long enough that ``done`` operations since the start took at least
    ``done / rate`` seconds; a rate <= 0 never waits.
    """

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._started = time.monotonic()

    def wait(self, done: int) -> None:
        if self.rate <= 0:
            return
        ahead = done / self.rate - (time.monotonic() - self._started)
        if ahead > 0:
            time.sleep(ahead)


def summary(verb: str, count: int, elapsed_s: float) -> str:
    """``produced 5000 messages in 0.21 s (23,810 msg/s)``."""
    rate = count / elapsed_s if elapsed_s > 0 else 0.0
    return f"{verb} {count} messages in {elapsed_s:.2f} s ({rate:,.0f} msg/s)"
