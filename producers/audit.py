"""The producer tier of the audit (the paper's section 5): what each server had acknowledged, per topic
and window of event time.

Every event is counted under its server, its topic and the fixed window its `header.eventTime` falls
in: in flight when handed to the producer, then acknowledged (with its encoded size) or failed. A window
closes once the clock has passed its end and none of its events is still in flight; `close_windows`
then returns one AuditCount record per (server, topic, window) with the acknowledged count and bytes,
the failures counted apart in `properties` (`failed`, `failedBytes`) and never as acknowledged.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

__all__ = ["AuditCounter", "PRODUCER_TIER"]

PRODUCER_TIER = "producer"


class _Window:
    __slots__ = ("in_flight", "count", "bytes", "failed", "failed_bytes")

    def __init__(self) -> None:
        self.in_flight = self.count = self.bytes = self.failed = self.failed_bytes = 0


class AuditCounter:
    """Counts per (server, topic, window); safe to call from the sending thread and the acknowledging one."""

    def __init__(self, *, window_ms: int, datacenter: str, application: str, tier: str = PRODUCER_TIER) -> None:
        if window_ms <= 0:
            raise ValueError(f"the audit window must be positive, got {window_ms} ms")
        self.window_ms = window_ms
        self.datacenter = datacenter
        self.application = application
        self.tier = tier
        self._windows: dict[tuple[str, str, int], _Window] = {}
        self._lock = threading.Lock()

    def window_start(self, event_time_ms: int) -> int:
        return event_time_ms - event_time_ms % self.window_ms

    def sent(self, server: str, topic: str, event_time_ms: int, n: int = 1) -> None:
        """`n` events were handed to the producer: in flight until acknowledged or failed."""
        self.sent_all({(server, topic): n}, event_time_ms)

    def sent_all(self, counts: Mapping[tuple[str, str], int], event_time_ms: int) -> None:
        """Events handed to the producer, `counts[(server, topic)]` of each, all of one event time."""
        start = event_time_ms - event_time_ms % self.window_ms
        with self._lock:
            windows = self._windows
            for (server, topic), n in counts.items():
                window = windows.get((server, topic, start))
                if window is None:
                    window = windows[(server, topic, start)] = _Window()
                window.in_flight += n

    def settled(self, outcomes: list[tuple[str, str, int, int]], acknowledged: bool) -> None:
        """Events (server, topic, event time, encoded bytes) the broker acknowledged, or that failed."""
        window_ms = self.window_ms
        with self._lock:
            windows = self._windows
            for server, topic, event_time_ms, size in outcomes:
                window = windows[(server, topic, event_time_ms - event_time_ms % window_ms)]
                window.in_flight -= 1
                if acknowledged:
                    window.count += 1
                    window.bytes += size
                else:
                    window.failed += 1
                    window.failed_bytes += size

    def in_flight(self) -> int:
        with self._lock:
            return sum(w.in_flight for w in self._windows.values())

    def close_windows(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """AuditCount records of the windows that ended by `now_ms` with nothing in flight, removed from the
        counter; `now_ms` None closes every window (at shutdown, after the producer settled everything)."""
        closed = []
        with self._lock:
            for key, window in list(self._windows.items()):
                server, topic, start = key
                if now_ms is not None and (start + self.window_ms > now_ms or window.in_flight):
                    continue
                del self._windows[key]
                closed.append(self._record(server, topic, start, window))
        closed.sort(key=lambda r: (r["windowStart"], r["host"], r["topic"]))
        return closed

    def _record(self, server: str, topic: str, start: int, window: _Window) -> dict[str, Any]:
        properties = {"failed": str(window.failed), "failedBytes": str(window.failed_bytes)}
        if window.in_flight:
            properties["unsettled"] = str(window.in_flight)
        return {"topic": topic, "tier": self.tier, "windowStart": start, "windowEnd": start + self.window_ms,
                "host": server, "datacenter": self.datacenter, "application": self.application,
                "count": window.count, "bytes": window.bytes, "sketch": None, "properties": properties}
