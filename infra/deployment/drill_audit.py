"""What the audit says of a fault drill: the reconciled windows of event time that cover it, tallied per tier.

The audit's JSON API (``/api/windows`` and ``/api/windows/{topic}/{datacenter}/{start}``, see
:mod:`audit.http_api`) gives, per window, each tier's count and the events named between adjacent tiers.
:func:`tally` turns the windows into one line per tier *relative to what the producers acknowledged*: an event's
copies at a tier are one plus the duplicates minus the missing named on the way there, so a tier that merely
under-counted (a mirror killed before it published its counts) does not make the tiers after it look lost.
:func:`wait_for_audit` polls until every covering window is reconciled and nothing is missing any more (a later
tier, the warehouse after the ETL's next run, may still catch up), or its deadline passes.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TextIO

from audit.reconcile import TIERS

__all__ = ["AuditApi", "TierTally", "Verdict", "covering", "tally", "wait_for_audit"]

HTTP_TIMEOUT_S = 5.0
SHOWN_IDS = 5
# The tiers that hold the events (the others are counts that clients publish of what they were acknowledged):
# an event missing there is lost; a mirror killed before it published its counts only under-counts its tier.
DATA_TIERS = frozenset({"datacenter", "offline", "warehouse"})


@dataclass
class TierTally:
    """One tier over the drill's windows: events counted, completeness against the producers, named events."""

    tier: str
    count: int = 0
    produced: int = 0
    missing: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    undecoded: int = 0

    @property
    def completeness(self) -> float | None:
        return None if not self.produced else self.count / self.produced

    def describe(self) -> str:
        completeness = "n/a" if self.completeness is None else f"{self.completeness:.3f}"
        parts = [f"{self.tier:<10} completeness {completeness} ({self.count} of {self.produced})",
                 f"missing {_ids(self.missing)}", f"duplicated {_ids(self.duplicated)}"]
        if self.undecoded:
            parts.append(f"{self.undecoded} window(s) differ by more than the audit could name")
        return ", ".join(parts)


def _ids(ids: list[str]) -> str:
    if not ids:
        return "0"
    shown = ", ".join(ids[:SHOWN_IDS])
    more = f", ... {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return f"{len(ids)} ({shown}{more})"


@dataclass
class Verdict:
    """The tiers' tallies; ``lost`` (one line) when an event is missing from a tier that holds the events, or such
    a tier differs from the one before it by more than the audit could name."""

    tiers: list[TierTally]
    windows: int

    @property
    def lost(self) -> str | None:
        for tier in self.tiers:
            if tier.tier not in DATA_TIERS:
                continue
            if tier.missing:
                return f"{len(tier.missing)} event(s) missing at tier {tier.tier} (first: {tier.missing[0]})"
            if tier.undecoded:
                return (f"tier {tier.tier} differs from the tier before it by more than the audit could name in "
                        f"{tier.undecoded} window(s)")
        return None


def covering(windows: Iterable[Mapping[str, Any]], start_ms: int, end_ms: int) -> list[Mapping[str, Any]]:
    """The windows (as /api/windows lists them) whose event time overlaps [start_ms, end_ms]."""
    return [w for w in windows if w["windowStart"] <= end_ms and w["windowEnd"] > start_ms]


def tally(windows: Iterable[Mapping[str, Any]]) -> Verdict:
    """Per tier over ``windows`` (each with its ``discrepancies``, as /api/windows/{topic}/{dc}/{start} gives it)."""
    tallies = {tier: TierTally(tier) for tier in TIERS}
    seen: set[str] = set()
    count = 0
    for window in windows:
        count += 1
        counts = window["counts"]
        produced = counts.get(TIERS[0], 0)
        for tier, counted in counts.items():
            if tier in tallies:
                seen.add(tier)
                tallies[tier].count += counted
                tallies[tier].produced += produced
        # An event's copies at each tier, from the producers on: +duplicated -missing at every step.
        copies: Counter[str] = Counter()
        by_later = {d["later"]: d for d in window["discrepancies"]}
        for tier in TIERS[1:]:
            discrepancy = by_later.get(tier)
            if discrepancy is not None:
                copies.update(discrepancy["duplicated"])
                copies.subtract(discrepancy["missing"])
                if not discrepancy["decoded"]:
                    tallies[tier].undecoded += 1
            if tier in counts:
                tallies[tier].missing += sorted(i for i, n in copies.items() if n < 0)
                tallies[tier].duplicated += sorted(i for i, n in copies.items() if n > 0)
    return Verdict([tallies[tier] for tier in TIERS if tier in seen], count)


class AuditApi:
    """The audit service's JSON API at ``base_url``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base_url + path, timeout=HTTP_TIMEOUT_S) as answer:
            return json.loads(answer.read())

    def windows(self, since_ms: int) -> list[dict[str, Any]]:
        return self._get(f"/api/windows?since={since_ms}")["windows"]

    def window(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """One window with its named events (``discrepancies``)."""
        return self._get(window_path(summary))


def window_path(summary: Mapping[str, Any]) -> str:
    """The audit API's path of the window ``summary`` (as /api/windows lists it), with its named events."""
    return "/api/windows/" + "/".join(urllib.parse.quote(str(summary[key]), safe="")
                                      for key in ("topic", "datacenter", "windowStart"))


def _settled(summary: Mapping[str, Any], grace_ms: int) -> bool:
    return summary["reconciledAt"] >= summary["windowEnd"] + grace_ms


def wait_for_audit(api: AuditApi, start_ms: int, end_ms: int, *, window_ms: int, grace_ms: int, deadline_s: float,
                   out: TextIO, now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                   sleep: Callable[[float], None] = time.sleep) -> Verdict:
    """Wait until the windows covering [start_ms, end_ms] are past their grace and reconciled, then until nothing
    is missing any more or ``deadline_s`` passes; the verdict over them. ``OSError`` when the audit never answered."""
    deadline = time.monotonic() + deadline_s
    closed_at = end_ms - end_ms % window_ms + window_ms + grace_ms
    if closed_at > now_ms():
        print(f"waiting {(closed_at - now_ms()) / 1000:.0f}s for the windows to close and pass their grace "
              f"(window {window_ms} ms, grace {grace_ms} ms)", file=out, flush=True)
    verdict: Verdict | None = None
    failure: OSError | None = None
    announced = False
    while True:
        if now_ms() >= closed_at:
            try:
                summaries = covering(api.windows(start_ms - window_ms), start_ms, end_ms)
                if summaries and all(_settled(s, grace_ms) for s in summaries):
                    verdict = tally(api.window(s) if s["namedEvents"] or s["undecoded"] else {**s, "discrepancies": []}
                                    for s in summaries)
                    if verdict.lost is None:
                        return verdict
                    if not announced:
                        print(f"the audit names missing events now ({verdict.lost}); waiting for later tiers to "
                              f"catch up (at most {max(0.0, deadline - time.monotonic()):.0f}s more)",
                              file=out, flush=True)
                        announced = True
                failure = None
            except (OSError, ValueError, KeyError) as exc:
                failure = exc if isinstance(exc, OSError) else OSError(str(exc))
        if time.monotonic() >= deadline:
            if verdict is not None:
                return verdict
            raise failure or OSError(f"the audit had not reconciled the windows of the drill within {deadline_s:.0f}s")
        sleep(0.5)
