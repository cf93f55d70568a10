"""The run history: one JSON file per finished run under ``WAREHOUSE/_etl/GROUP/history``, newest kept.

Written atomically and owner-only (etl.files), so a reader never sees half a report; a driver killed while
writing leaves at most a stray temporary file, ignored and cleaned up by the next record.
"""

from __future__ import annotations

from pathlib import Path

from etl.files import write_bytes_atomically
from etl.report import SUCCEEDED, RunReport
from pipeline.durable_file import make_private_dir

__all__ = ["RunHistory"]


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
        write_bytes_atomically(path, report.to_json().encode())
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
