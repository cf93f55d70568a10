"""What one ETL run did: its ranges, rows, bytes, duration, outcome and error, as recorded in the run history."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["FAILED", "NOTHING_NEW", "OUTCOMES", "RangeReport", "RunReport", "SUCCEEDED", "SkippedOffsets"]

SUCCEEDED = "succeeded"
FAILED = "failed"
NOTHING_NEW = "nothing-new"
OUTCOMES = (SUCCEEDED, FAILED, NOTHING_NEW)


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

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.ranges)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.ranges)

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
