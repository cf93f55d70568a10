"""Reconciliation results kept on disk: one JSON line per window each time its result changes, read back at
start so that a restarted audit service keeps its history (the newest line of a window wins). The service
rewrites the file with the newest result of each retained window whenever it grew to twice what that rewrite left
(and at least ``MIN_COMPACT_BYTES``), so its size follows the windows retained (retain.ms), not the time running.

A result's JSON (the API's window): ``topic``, ``datacenter``, ``windowStart``, ``windowEnd``, ``reconciledAt``,
``state`` (pending, complete, incomplete), ``counts`` and ``completeness`` per tier (the producer tier counts the
events created; ``acknowledged`` those its cluster acknowledged), ``ready`` (tier -> the moment as of which it had
counted everything of the window) and ``pending`` (tier -> what it waits for), the ``discrepancies`` between tiers,
what is named -- ``lost`` (tier -> id -> copies), ``lostByCount`` (tier -> events lost that no sketch names),
``duplicated`` (tier -> id -> copies), ``unexpected`` (tier -> id -> copies: held there, created by no producer the
audit hears from), ``quarantined`` (tier, reason, count, withoutId, ids) -- and the ``identity`` (null until every
tier is ready and decoded; ``duplicates`` and ``unexpected`` are the extra copies it subtracts; ``holds`` false: the
window is unaccounted for).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from audit.reconcile import COMPLETE, INCOMPLETE, Discrepancy, Identity, Quarantine, WindowKey, WindowResult
from pipeline.durable_file import (
    PRIVATE_FILE_MODE,
    append_durably,
    make_private_dir,
    make_private_file,
    write_atomically,
)

__all__ = ["MIN_COMPACT_BYTES", "ResultLog", "result_from_json", "result_to_json"]

#: The file is rewritten once it grew past twice its size after the last rewrite, and past this.
MIN_COMPACT_BYTES = 1 << 20


def result_to_json(result: WindowResult, reconciled_at_ms: int, ready_at: dict[str, int] | None = None
                   ) -> dict[str, Any]:
    key = result.key
    identity = result.identity
    return {"topic": key.topic, "datacenter": key.datacenter, "windowStart": key.window_start,
            "windowEnd": key.window_end, "reconciledAt": reconciled_at_ms, "state": result.state,
            "counts": result.counts, "completeness": result.completeness, "acknowledged": result.acknowledged,
            "ready": {tier: (ready_at or {}).get(tier) for tier in result.ready}, "pending": result.pending,
            "tierStates": result.tier_states(),
            "discrepancies": [{"earlier": d.earlier, "later": d.later, "missing": d.missing,
                               "duplicated": d.duplicated, "unexpected": d.unexpected, "decoded": d.decoded,
                               "read": d.read, "unnamed": d.unnamed}
                              for d in result.discrepancies],
            "lost": result.lost, "lostByCount": result.lost_by_count, "duplicated": result.duplicated,
            "unexpected": result.unexpected,
            "quarantined": [{"tier": q.tier, "reason": q.reason, "count": q.count, "withoutId": q.without_id,
                             "ids": q.ids} for q in result.quarantined],
            "identity": None if identity is None else {
                "tier": identity.tier, "created": identity.created, "held": identity.held,
                "duplicates": identity.duplicates, "unexpected": identity.unexpected, "lost": identity.lost,
                "quarantined": identity.quarantined, "holds": identity.holds},
            "threshold": result.threshold}


def result_from_json(data: dict[str, Any]) -> WindowResult:
    """The result ``data`` holds (a line of an older audit, without what it did not know, reads as complete or
    incomplete by its discrepancies)."""
    key = WindowKey(data["topic"], data["datacenter"], data["windowStart"], data["windowEnd"])
    discrepancies = [Discrepancy(d["earlier"], d["later"], d["missing"], d["duplicated"], d["decoded"],
                                 d.get("read", False), d.get("unnamed", 0), d.get("unexpected") or {})
                     for d in data["discrepancies"]]
    identity = data.get("identity")
    return WindowResult(
        key, data["counts"], data["completeness"], discrepancies,
        state=data.get("state") or (INCOMPLETE if discrepancies else COMPLETE),
        ready=list(data.get("ready") or data["counts"]), pending=data.get("pending") or {},
        acknowledged=data.get("acknowledged"), lost=data.get("lost") or {}, lost_by_count=data.get("lostByCount") or {},
        duplicated=data.get("duplicated") or {}, unexpected=data.get("unexpected") or {},
        quarantined=[Quarantine(q["tier"], q["reason"], q["count"], q["withoutId"], q["ids"])
                     for q in data.get("quarantined") or []],
        identity=None if identity is None else Identity(identity["tier"], identity["created"], identity["held"],
                                                         identity["duplicates"], identity["lost"],
                                                         identity["quarantined"], identity.get("unexpected", 0)),
        threshold=data.get("threshold", 1.0))


class ResultLog:
    """Appends results to ``path`` (fsync'd, owner-only) and reads the newest per window back."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        #: The file's size after its last rewrite (None: not rewritten by this process yet).
        self.compacted_bytes: int | None = None

    def read(self, since_ms: int | None = None) -> dict[WindowKey, dict[str, Any]]:
        """The newest stored result of each window (starting at or after ``since_ms``), as JSON dicts."""
        newest: dict[WindowKey, dict[str, Any]] = {}
        for data in self._lines():
            if since_ms is None or data["windowStart"] >= since_ms:
                newest[WindowKey(data["topic"], data["datacenter"], data["windowStart"], data["windowEnd"])] = data
        return newest

    def append(self, results: list[dict[str, Any]]) -> None:
        if not results:
            return
        make_private_dir(self.path.parent, tighten=True)
        append_durably(self.path, "".join(json.dumps(data, sort_keys=True) + "\n" for data in results).encode(),
                       mode=PRIVATE_FILE_MODE)
        make_private_file(self.path)

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def needs_compaction(self) -> bool:
        """Whether the file grew to twice what the last rewrite left (and past ``MIN_COMPACT_BYTES``)."""
        return self.size() > max(MIN_COMPACT_BYTES, 2 * (self.compacted_bytes or 0))

    def compact(self, since_ms: int) -> None:
        """Rewrite the file with only the newest result of each window starting at or after ``since_ms``."""
        self.rewrite(self.read(since_ms).values())

    def rewrite(self, results: Iterable[dict[str, Any]]) -> None:
        """Replace the file by ``results`` (one per window), atomically."""
        kept = sorted(results, key=lambda d: (d["windowStart"], d["topic"], d["datacenter"]))
        make_private_dir(self.path.parent, tighten=True)
        data = "".join(json.dumps(d, sort_keys=True) + "\n" for d in kept).encode()
        write_atomically(self.path, data, mode=PRIVATE_FILE_MODE)
        make_private_file(self.path)
        self.compacted_bytes = len(data)

    def _lines(self) -> Iterator[dict[str, Any]]:
        try:
            with open(self.path) as lines:
                for line in lines:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue  # a line cut short by a crash while appending
        except FileNotFoundError:
            return
