"""WarningLimiter: at most one warning line per source and kind of problem per interval.

A client flooding the broker with malformed frames would otherwise write one line per frame (243 MB of log in
2.5 minutes was seen), and a producer retrying every 100 ms through a broker outage one line per retry. The first
warning of a (source, kind) -- a client's address and what it sent, a producer and the error it retries -- is
logged; the next ones within the interval are counted, not logged, and the count is logged with the next warning
after the interval or, if none comes, by :meth:`flush` (the broker's socket server calls it from its periodic
scan). Every warning, logged or not, is counted by kind in ``counts`` for the metrics.

Not thread-safe: each limiter is used by one thread at a time (the broker's event loop, a producer's sender).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Callable

# Sources tracked at once; past this, warnings of new sources share one entry per kind (many client addresses at
# once, e.g. an IPv6 range, cannot grow the table).
MAX_TRACKED = 10_000
OTHER_SOURCES = "other addresses"


class WarningLimiter:
    """Logs warnings to ``logger``, limited per (source, kind) to one per ``interval_s`` seconds."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self.interval_s = interval_s
        self._clock = clock
        # (source, kind) -> [time of the last line logged, warnings suppressed since]
        self._recent: dict[tuple[str, str], list] = {}
        self.counts: Counter[str] = Counter()

    def warn(self, source: str, kind: str, message: str, *args: object, exc_info: bool = False,
             level: int = logging.WARNING, logger: logging.Logger | None = None) -> None:
        """Log ``message % args`` unless a warning of this kind from ``source`` was logged within the interval
        (``exc_info``: with the traceback of the exception being handled; ``level`` and ``logger``: other than
        the limiter's WARNING and logger)."""
        self.counts[kind] += 1
        now = self._clock()
        key = (source, kind)
        entry = self._recent.get(key)
        if entry is None and len(self._recent) >= MAX_TRACKED:
            key = (OTHER_SOURCES, kind)
            entry = self._recent.get(key)
        if entry is not None and now - entry[0] < self.interval_s:
            entry[1] += 1
            return
        suppressed = entry[1] if entry is not None else 0
        self._recent[key] = [now, 0]
        out = logger or self._log
        if suppressed:
            out.log(level, message + " (and %d more %s warning(s) from %s in the last %.0fs, not logged)",
                    *args, suppressed, kind, key[0], now - entry[0], exc_info=exc_info, stacklevel=2)
        else:
            out.log(level, message, *args, exc_info=exc_info, stacklevel=2)

    def flush(self) -> None:
        """Log the counts of warnings suppressed in intervals that ended, and forget those entries."""
        now = self._clock()
        for key, (logged_at, suppressed) in list(self._recent.items()):
            if now - logged_at < self.interval_s:
                continue
            del self._recent[key]
            if suppressed:
                self._log.warning("%d more %s warning(s) from %s in %.0fs, not logged", suppressed, key[1], key[0],
                                  now - logged_at)
