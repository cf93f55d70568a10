"""Reconciling the tiers of one topic, datacenter and window of event time (pure logic, no I/O).

Tiers, in pipeline order (``TIERS``): ``producer`` (acknowledged by the datacenter cluster, the emulators'
AuditCounts), ``datacenter`` (what that cluster holds, counted by the audit service), ``mirror``
(acknowledged by the offline cluster), ``offline`` (what the offline cluster holds) and ``warehouse`` (rows the
ETL published). Each tier brings a count, bytes and the sketch of its event ids (summed over the hosts
that counted). Completeness of a tier = its count / the producer tier's count. Where two adjacent tiers
that both have sketches disagree, the difference of their sketches is decoded into the event ids missing at
the later tier and those it holds more often (duplicates); a difference too large to decode is marked
undecoded, for the caller to settle by reading the window's events (``WindowResult.undecoded``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from audit.sketch import EventSketch

__all__ = ["TIERS", "Discrepancy", "TierCount", "WindowKey", "WindowResult", "reconcile"]

TIERS = ("producer", "datacenter", "mirror", "offline", "warehouse")


@dataclass(frozen=True, order=True)
class WindowKey:
    """One reconciled unit: a topic's events of one datacenter in one window of event time."""

    topic: str
    datacenter: str
    window_start: int
    window_end: int


@dataclass
class TierCount:
    """What one tier counted in a window, summed over its hosts (``sketch`` None: no ids reported)."""

    count: int = 0
    bytes: int = 0
    sketch: EventSketch | None = None
    hosts: int = 0

    def add(self, count: int, size: int, sketch: EventSketch | None) -> None:
        self.count += count
        self.bytes += size
        self.hosts += 1
        if sketch is not None:
            self.sketch = sketch if self.sketch is None else self.sketch + sketch


@dataclass
class Discrepancy:
    """Between ``earlier`` and ``later`` (adjacent tiers that both counted): the events missing at the later
    tier and those it holds more often than the earlier one, each with the number of copies; ``decoded``
    False when the sketches differ by more than they can name (then the lists may be partial)."""

    earlier: str
    later: str
    missing: dict[str, int] = field(default_factory=dict)
    duplicated: dict[str, int] = field(default_factory=dict)
    decoded: bool = True
    #: True when the events were named by reading the window back from the clusters (too many for the sketch).
    read: bool = False


@dataclass
class WindowResult:
    """The reconciliation of one window: counts and completeness per tier, and the discrepancies."""

    key: WindowKey
    counts: dict[str, int]
    completeness: dict[str, float | None]
    discrepancies: list[Discrepancy]

    @property
    def undecoded(self) -> list[Discrepancy]:
        return [d for d in self.discrepancies if not d.decoded]

    def complete(self, threshold: float = 1.0) -> bool:
        """Whether every tier that counted reached ``threshold`` (and nothing was lost or duplicated)."""
        return all(c is None or c >= threshold for c in self.completeness.values()) and not any(
            d.missing or d.duplicated or not d.decoded for d in self.discrepancies)


def reconcile(key: WindowKey, tiers: Mapping[str, TierCount], order: Iterable[str] = TIERS,
              expected: Iterable[str] = ()) -> WindowResult:
    """Compare the tiers that counted ``key``'s window, each with the one before it in ``order``; a tier of
    ``expected`` that counted nothing in this window (every event lost there) counts as zero events."""
    tiers = {**{t: TierCount(sketch=EventSketch()) for t in expected}, **tiers}
    present = [t for t in order if t in tiers]
    counts = {t: tiers[t].count for t in present}
    produced = counts.get(TIERS[0])
    completeness: dict[str, float | None] = {
        t: (None if not produced else counts[t] / produced) if produced is not None else None for t in present}
    discrepancies = []
    for earlier, later in zip(present, present[1:]):
        a, b = tiers[earlier], tiers[later]
        if a.sketch is None or b.sketch is None:
            if a.count != b.count:
                discrepancies.append(Discrepancy(earlier, later, decoded=False))
            continue
        difference = b.sketch - a.sketch
        if difference.is_empty():
            continue
        decoded = difference.decode()
        discrepancies.append(Discrepancy(earlier, later, decoded.missing, decoded.extra, decoded.complete))
    return WindowResult(key, counts, completeness, discrepancies)
