"""Latency from event time to a tier, as fixed-bucket counts that add up across hosts and processes.

Each tier that counts events notes, per window, how long after its event time each event reached it (the
emulators and the mirror: when the broker acknowledged it; the ETL: when its row was loaded; the audit's own
consumers: when they read it). The counts travel in AuditCount's properties (``latency``: the bucket counts
and the sum) and the audit service exports the sums per topic and tier as a Prometheus histogram.
"""

from __future__ import annotations

import bisect
from typing import Iterable

__all__ = ["BUCKETS", "LatencyBuckets"]

#: Upper bounds in seconds (a last, unbounded bucket follows).
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class LatencyBuckets:
    """Counts of latencies per bucket of ``BUCKETS`` (plus one beyond the last) and their sum in seconds."""

    __slots__ = ("counts", "total")

    def __init__(self, counts: Iterable[int] | None = None, total: float = 0.0) -> None:
        self.counts = list(counts) if counts is not None else [0] * (len(BUCKETS) + 1)
        if len(self.counts) != len(BUCKETS) + 1:
            raise ValueError(f"expected {len(BUCKETS) + 1} bucket counts, got {len(self.counts)}")
        self.total = total

    def add(self, seconds: float, n: int = 1) -> None:
        seconds = max(0.0, seconds)
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += n
        self.total += seconds * n

    def add_all(self, seconds: Iterable[float]) -> None:
        """``add`` of each of ``seconds``, in order (the same counts and the same float sum)."""
        counts = self.counts
        total = self.total
        for s in seconds:
            if s < 0.0:
                s = 0.0
            counts[bisect.bisect_left(BUCKETS, s)] += 1
            total += s
        self.total = total

    def merge(self, other: "LatencyBuckets") -> None:
        for i, count in enumerate(other.counts):
            self.counts[i] += count
        self.total += other.total

    @property
    def count(self) -> int:
        return sum(self.counts)

    def to_text(self) -> str:
        return ",".join(str(c) for c in self.counts) + f";{self.total:.3f}"

    @classmethod
    def from_text(cls, text: str) -> "LatencyBuckets":
        counts, _, total = text.partition(";")
        return cls((int(c) for c in counts.split(",")), float(total or 0))
