"""Reconciliation results kept on disk: one JSON line per window each time its result changes, read back at
start so that a restarted audit service keeps its history (the newest line of a window wins)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from audit.reconcile import Discrepancy, WindowKey, WindowResult
from pipeline.durable_file import write_atomically

__all__ = ["ResultLog", "result_from_json", "result_to_json"]


def result_to_json(result: WindowResult, reconciled_at_ms: int) -> dict[str, Any]:
    key = result.key
    return {"topic": key.topic, "datacenter": key.datacenter, "windowStart": key.window_start,
            "windowEnd": key.window_end, "reconciledAt": reconciled_at_ms, "counts": result.counts,
            "completeness": result.completeness,
            "discrepancies": [{"earlier": d.earlier, "later": d.later, "missing": d.missing,
                               "duplicated": d.duplicated, "decoded": d.decoded, "read": d.read}
                              for d in result.discrepancies]}


def result_from_json(data: dict[str, Any]) -> WindowResult:
    key = WindowKey(data["topic"], data["datacenter"], data["windowStart"], data["windowEnd"])
    return WindowResult(key, data["counts"], data["completeness"],
                        [Discrepancy(d["earlier"], d["later"], d["missing"], d["duplicated"], d["decoded"],
                                     d.get("read", False))
                         for d in data["discrepancies"]])


class ResultLog:
    """Appends results to ``path`` (fsync'd) and reads the newest per window back."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as out:
            for data in results:
                out.write(json.dumps(data, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def compact(self, since_ms: int) -> None:
        """Rewrite the file with only the newest result of each window starting at or after ``since_ms``."""
        kept = sorted(self.read(since_ms).values(), key=lambda d: (d["windowStart"], d["topic"], d["datacenter"]))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, "".join(json.dumps(data, sort_keys=True) + "\n" for data in kept).encode())

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
