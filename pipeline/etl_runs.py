"""The ETL's run history, the contract between the ETL (which records each run) and its readers (the audit, the
deployment's status, ``python -m etl history``): what one run did -- its ranges, rows, bytes, duration, outcome and
error, the topics it could not load, the records it quarantined and the warehouse's maintenance -- and where and how
each finished run is kept: one JSON file per run under ``WAREHOUSE/_etl/GROUP/history``, newest kept.

Outcomes: ``succeeded`` (new offsets loaded), ``nothing-new``, ``partial`` (every topic was loaded but those named
in ``topic_errors``, which are loaded again by the next run), ``failed`` (nothing was published, or the run could
not finish its maintenance; ``error`` says why).

A run's file is written atomically and owner-only, so a reader never sees half a report; a driver killed while
writing leaves at most a stray temporary file, ignored and cleaned up by the next record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.durable_file import make_private_dir, write_atomically

__all__ = ["FAILED", "NOTHING_NEW", "OUTCOMES", "PARTIAL", "RangeReport", "RunHistory", "RunReport", "SUCCEEDED",
           "SkippedOffsets"]

SUCCEEDED = "succeeded"
FAILED = "failed"
NOTHING_NEW = "nothing-new"
PARTIAL = "partial"
OUTCOMES = (SUCCEEDED, FAILED, NOTHING_NEW, PARTIAL)


@dataclass
class RangeReport:
    """One planned range [start, end) of a topic-partition and what loading it wrote."""

    topic: str
    partition: int
    start: int
    end: int
    rows: int = 0
    bytes: int = 0


@dataclass
class SkippedOffsets:
    """Offsets [start, end) of a partition that retention deleted before they were loaded (out.of.range=earliest)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


@dataclass
class RunReport:
    """One run of the ETL; ``finished_at`` is None while it runs. Times are seconds since the epoch."""

    run_id: str
    group: str
    started_at: float
    finished_at: float | None = None
    outcome: str | None = None
    error: str | None = None
    ranges: list[RangeReport] = field(default_factory=list)
    skipped: list[SkippedOffsets] = field(default_factory=list)
    #: Seconds from the run's start to its first Spark task starting (None: no task ran).
    first_task_s: float | None = None
    #: Topics not loaded and why (no reader schema, their Spark job failed); their offsets wait for the next run.
    topic_errors: dict[str, str] = field(default_factory=dict)
    #: Records set aside in the quarantine: topic -> reason -> count.
    quarantined: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The warehouse's upkeep: partitions_expired, files_expired, partitions_compacted, files_compacted,
    #: files_written (by compaction).
    maintenance: dict[str, int] = field(default_factory=dict)
    #: Why the upkeep (retention, compaction) failed, if it did; the run's loading stands.
    maintenance_error: str | None = None

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.ranges)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.ranges)

    @property
    def quarantined_records(self) -> int:
        return sum(sum(reasons.values()) for reasons in self.quarantined.values())

    @property
    def duration_s(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at

    def finish(self, outcome: str, finished_at: float, error: str | None = None) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        self.outcome, self.finished_at, self.error = outcome, finished_at, error

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunReport":
        data: dict[str, Any] = json.loads(text)
        data["ranges"] = [RangeReport(**r) for r in data.get("ranges", [])]
        data["skipped"] = [SkippedOffsets(**s) for s in data.get("skipped", [])]
        return cls(**data)


class RunHistory:
    """Records finished runs and lists them, newest first."""

    def __init__(self, warehouse: str | Path, group: str, keep: int = 1000) -> None:
        self.directory = Path(warehouse) / "_etl" / group / "history"
        self.keep = keep

    def record(self, report: RunReport) -> Path:
        """Store ``report`` (a finished run) and delete the oldest entries beyond ``keep``."""
        if report.finished_at is None:
            raise ValueError(f"run {report.run_id} has not finished")
        make_private_dir(self.directory)
        path = self.directory / f"{int(report.started_at * 1000):015d}-{report.run_id}.json"
        write_atomically(path, report.to_json().encode(), mode=0o600)
        for old in self._files()[self.keep:]:
            old.unlink(missing_ok=True)
        for stray in self.directory.glob("*.json.tmp"):
            stray.unlink(missing_ok=True)
        return path

    def runs(self, limit: int | None = None) -> list[RunReport]:
        """The recorded runs, newest first (at most ``limit``)."""
        files = self._files()
        if limit is not None:
            files = files[:limit]
        return [RunReport.from_json(f.read_text()) for f in files]

    def last_success(self) -> RunReport | None:
        return next((r for r in self.runs() if r.outcome == SUCCEEDED), None)

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("*.json"), reverse=True)
