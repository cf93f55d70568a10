"""What the audit says of a fault drill: the reconciled windows of event time that cover it, tallied per tier.

The audit's JSON API (``/api/windows`` and ``/api/windows/{topic}/{datacenter}/{start}``, see
:mod:`audit.http_api` and :mod:`audit.results`) gives, per window, each tier's count against the events created,
the tiers still pending, and what it names: events lost (with the tier where they went missing), duplicated (at the
data tier where the extra copy appears), unexpected (held at a tier, created by no producer the audit hears from: a
record another producer wrote, as ``chaos poison-record`` does) and quarantined (with the tier and the reason), and
whether the identity ``created = held - duplicates - unexpected + lost + quarantined`` holds. :func:`tally` adds
those up per tier over the drill's windows; the :class:`Verdict` fails (``lost``) when an event is lost, a window is
unaccounted for, or a tier that holds the events differs from the one before it by more than the audit could name;
an unexpected event is no loss: it is reported, it does not fail the drill. :func:`wait_for_audit` polls
until every covering window is reconciled and no tier is pending any more (the warehouse after the ETL's next run),
or its deadline passes.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TextIO

from audit.reconcile import DATA_TIERS, TIERS
from infra.deployment.programs import HttpAccess, http_get

__all__ = ["AuditApi", "TierTally", "Verdict", "covering", "tally", "wait_for_audit"]

HTTP_TIMEOUT_S = 5.0
SHOWN_IDS = 5


@dataclass
class TierTally:
    """One tier over the drill's windows: events counted, completeness against the events created, what is named
    there, and the windows it is still pending in or could not be named in."""

    tier: str
    count: int = 0
    created: int = 0
    lost: list[str] = field(default_factory=list)
    lost_by_count: int = 0
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    quarantined: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    undecoded: int = 0

    @property
    def completeness(self) -> float | None:
        return None if not self.created else self.count / self.created

    @property
    def lost_events(self) -> int:
        return len(self.lost) + self.lost_by_count

    def describe(self) -> str:
        completeness = "n/a" if self.completeness is None else f"{self.completeness:.3f}"
        parts = [f"{self.tier:<10} completeness {completeness} ({self.count} of {self.created} created)",
                 f"lost {_ids(self.lost, self.lost_by_count)}", f"duplicated {_ids(self.duplicated)}",
                 *([f"unexpected {_ids(self.unexpected)}"] if self.unexpected else []),
                 "quarantined " + (", ".join(f"{n} ({reason})" for reason, n in sorted(self.quarantined.items()))
                                   or "0")]
        if self.pending:
            parts.append(f"pending in {self.pending} window(s)")
        if self.undecoded:
            parts.append(f"{self.undecoded} window(s) differ by more than the audit could name")
        return ", ".join(parts)


def _ids(ids: list[str], unnamed: int = 0) -> str:
    if not ids and not unnamed:
        return "0"
    shown = ", ".join(ids[:SHOWN_IDS])
    more = f", ... {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    named = f" ({shown}{more})" if ids else ""
    without = f" ({unnamed} not named: too many for the sketches)" if unnamed else ""
    return f"{len(ids) + unnamed}{named}{without}"


@dataclass
class Verdict:
    """The tiers' tallies over the drill's windows, and those unaccounted for; ``lost`` (one line) when an event is
    lost, a window is unaccounted for, or a tier that holds the events differs from the one before it by more than
    the audit could name."""

    tiers: list[TierTally]
    windows: int
    unaccounted: list[str] = field(default_factory=list)
    pending: int = 0

    @property
    def lost(self) -> str | None:
        for tier in self.tiers:
            if tier.lost_events:
                first = f" (first: {tier.lost[0]})" if tier.lost else ""
                return f"{tier.lost_events} event(s) lost at tier {tier.tier}{first}"
        if self.unaccounted:
            return f"{len(self.unaccounted)} window(s) unaccounted for (first: {self.unaccounted[0]})"
        for tier in self.tiers:
            if tier.tier in DATA_TIERS and tier.undecoded:
                return (f"tier {tier.tier} differs from the tier before it by more than the audit could name in "
                        f"{tier.undecoded} window(s)")
        return None

    def describe(self) -> list[str]:
        """One line per tier, then the windows still pending and those unaccounted for."""
        lines = [tier.describe() for tier in self.tiers]
        if self.pending:
            lines.append(f"{self.pending} window(s) still pending at some tier (not compared there yet)")
        lines += [f"unaccounted for: {window}" for window in self.unaccounted]
        return lines


def covering(windows: Iterable[Mapping[str, Any]], start_ms: int, end_ms: int) -> list[Mapping[str, Any]]:
    """The windows (as /api/windows lists them) whose event time overlaps [start_ms, end_ms]."""
    return [w for w in windows if w["windowStart"] <= end_ms and w["windowEnd"] > start_ms]


def _unaccounted(window: Mapping[str, Any]) -> str:
    i = window["identity"]
    return (f"{window['topic']} {window['datacenter']} {window['windowStart']}: created {i['created']} != "
            f"{i['held']} held at {i['tier']} - {i['duplicates']} duplicates - {i.get('unexpected', 0)} unexpected + "
            f"{i['lost']} lost + {i['quarantined']} quarantined")


def tally(windows: Iterable[Mapping[str, Any]]) -> Verdict:
    """Per tier over ``windows`` (as /api/windows/{topic}/{dc}/{start} gives them, or their summaries when they name
    nothing)."""
    tallies = {tier: TierTally(tier) for tier in TIERS}
    seen: set[str] = set()
    count = pending = 0
    unaccounted = []
    for window in windows:
        count += 1
        counts = window["counts"]
        created = counts.get(TIERS[0], 0)
        for tier, counted in counts.items():
            if tier in tallies:
                seen.add(tier)
                tallies[tier].count += counted
                tallies[tier].created += created
        for tier in window.get("pending") or {}:
            if tier in tallies:
                tallies[tier].pending += 1
        pending += bool(window.get("pending"))
        for tier, ids in (window.get("lost") or {}).items():
            tallies[tier].lost += sorted(ids)
        for tier, n in (window.get("lostByCount") or {}).items():
            tallies[tier].lost_by_count += n
        for tier, ids in (window.get("duplicated") or {}).items():
            tallies[tier].duplicated += sorted(ids)
        for tier, ids in (window.get("unexpected") or {}).items():
            tallies[tier].unexpected += sorted(ids)
        for q in window.get("quarantined") or []:
            reasons = tallies[q["tier"]].quarantined
            reasons[q["reason"]] = reasons.get(q["reason"], 0) + q["count"] + q["withoutId"]
        for d in window.get("discrepancies") or []:
            if not d["decoded"] and d["later"] in tallies:
                tallies[d["later"]].undecoded += 1
        identity = window.get("identity")
        if identity and not identity["holds"]:
            unaccounted.append(_unaccounted(window))
    return Verdict([tallies[tier] for tier in TIERS if tier in seen], count, unaccounted, pending)


class AuditApi:
    """The audit service's JSON API at ``base_url`` (over HTTPS as ``access`` says, when given)."""

    def __init__(self, base_url: str, access: HttpAccess | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.access = access

    def _get(self, path: str) -> Any:
        return json.loads(http_get(self.base_url + path, self.access, HTTP_TIMEOUT_S))

    def windows(self, since_ms: int) -> list[dict[str, Any]]:
        return self._get(f"/api/windows?since={since_ms}")["windows"]

    def window(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """One window with its named events."""
        return self._get(window_path(summary))


def window_path(summary: Mapping[str, Any]) -> str:
    """The audit API's path of the window ``summary`` (as /api/windows lists it), with its named events."""
    return "/api/windows/" + "/".join(urllib.parse.quote(str(summary[key]), safe="")
                                      for key in ("topic", "datacenter", "windowStart"))


def _settled(summary: Mapping[str, Any], grace_ms: int) -> bool:
    return summary["reconciledAt"] >= summary["windowEnd"] + grace_ms


def _names(summary: Mapping[str, Any]) -> bool:
    return bool(summary.get("namedEvents") or summary.get("undecoded"))


def wait_for_audit(api: AuditApi, start_ms: int, end_ms: int, *, window_ms: int, grace_ms: int, deadline_s: float,
                   out: TextIO, now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                   sleep: Callable[[float], None] = time.sleep) -> Verdict:
    """Wait until the windows covering [start_ms, end_ms] are past their grace and reconciled, then until no tier
    is pending in them or ``deadline_s`` passes; the verdict over them. ``OSError`` when the audit never answered."""
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
                    verdict = tally(api.window(s) if _names(s) else s for s in summaries)
                    if not verdict.pending:
                        return verdict
                    if not announced:
                        tiers = sorted({t for s in summaries for t in s.get("pending") or {}}, key=TIERS.index)
                        print(f"{verdict.pending} window(s) still pending at {', '.join(tiers)}: waiting for those "
                              f"tiers to catch up (at most {max(0.0, deadline - time.monotonic()):.0f}s more)",
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
