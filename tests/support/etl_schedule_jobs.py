"""A stand-in for the ETL's Spark load, for the scheduler's tests: it records each run's start and end in a
shared file, takes a moment, records its RunReport in the run history as ``etl.job.run_once`` does, and fails
on demand. ``python -m tests.support.etl_schedule_jobs --record FILE --name N [--seconds S] [--fail] run
...`` runs the real ``run`` command line (the scheduler) with it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, NamedTuple

from etl.config import EtlConfig
from pipeline.etl_runs import FAILED, SUCCEEDED, RangeReport, RunHistory, RunReport, SkippedOffsets
from tests.support.process import ChildProcess, python_env, python_module

ROWS = 10
BYTES = 1000


class StandInFailure(RuntimeError):
    """The run failed, as ``run_once`` raises after recording a failed run."""


class Span(NamedTuple):
    """One run as the record file has it."""

    name: str
    start: float
    end: float
    held_at_end: bool


class RecordingJob:
    """Each call: append ``start NAME T`` to ``record``, work ``seconds``, record the run's report, append
    ``end NAME T HELD`` (HELD: what ``still_locked()`` said at the end), raise when ``fail(N)`` is true for
    the Nth call (from 0)."""

    def __init__(self, record: Path, name: str, seconds: float = 0.3,
                 fail: Callable[[int], bool] = lambda _call: False) -> None:
        self.record, self.name, self.seconds, self.fail = Path(record), name, seconds, fail
        self.calls = 0

    def __call__(self, config: EtlConfig, *, still_locked: Callable[[], bool]) -> RunReport:
        call, self.calls = self.calls, self.calls + 1
        report = RunReport(run_id=uuid.uuid4().hex[:12], group=config["group.id"], started_at=time.time())
        self._append(f"start {self.name} {report.started_at!r}")
        time.sleep(self.seconds)  # the load's work
        held = still_locked()
        failing = self.fail(call)
        if failing:
            report.finish(FAILED, time.time(), "OffsetOutOfRange: t-0 lost 5 offsets\n  at a stack trace line")
        else:
            report.ranges = [RangeReport("t", 0, 0, ROWS, ROWS, BYTES)]
            report.skipped = [SkippedOffsets("t", 1, 0, 3)]
            report.first_task_s = 0.1
            report.finish(SUCCEEDED, time.time())
        RunHistory(config.warehouse, config["group.id"], config["history.keep"]).record(report)
        self._append(f"end {self.name} {time.time()!r} {held}")
        if failing:
            raise StandInFailure(report.error)
        return report

    def _append(self, line: str) -> None:
        with open(self.record, "a") as out:  # one write of a whole line: processes sharing the file don't mix
            out.write(line + "\n")


class GatedJob(RecordingJob):
    """A RecordingJob whose calls after the first ``free_calls`` wait for ``gate`` before they work."""

    def __init__(self, record: Path, gate: threading.Event, free_calls: int = 0,
                 fail: Callable[[int], bool] = lambda _call: False) -> None:
        super().__init__(record, "gated", seconds=0.0, fail=fail)
        self.gate, self.free_calls = gate, free_calls

    def __call__(self, config: EtlConfig, *, still_locked: Callable[[], bool]) -> RunReport:
        if self.calls >= self.free_calls:
            assert self.gate.wait(10.0), "the test never opened the gate"
        return super().__call__(config, still_locked=still_locked)


def read_spans(record: Path) -> list[Span]:
    """The finished runs of ``record``, by start time."""
    starts: dict[str, float] = {}
    spans = []
    if not record.exists():
        return spans
    for line in record.read_text().splitlines():
        kind, name, when, *rest = line.split()
        if kind == "start":
            starts[name] = float(when)
        else:
            spans.append(Span(name, starts.pop(name), float(when), rest == ["True"]))
    return sorted(spans, key=lambda span: span.start)


def started(record: Path) -> int:
    """How many runs began, finished or not."""
    return sum(line.startswith("start ") for line in record.read_text().splitlines()) if record.exists() else 0


class ScheduleProcess:
    """``python -m etl run ...`` (the scheduler) with a RecordingJob, as a child process (on the process harness)
    logging to ``log_path``."""

    def __init__(self, log_path: Path, record: Path, name: str, args: list[str], seconds: float = 0.3) -> None:
        self.log_path = log_path
        self.child = ChildProcess("the scheduler", python_module(
            "tests.support.etl_schedule_jobs", "--record", str(record), "--name", name, "--seconds", str(seconds),
            "run", *args), log_path, env=python_env(), error=AssertionError).spawn()

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.child.process

    def alive(self) -> bool:
        """True while running; AssertionError with the log once it exited (for polled conditions)."""
        if not self.child.running:
            raise AssertionError(f"the scheduler exited with {self.child.returncode}:\n{self.log_path.read_text()}")
        return True

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; the exit code."""
        return self.child.stop(timeout)

    def kill(self) -> None:
        self.child.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--fail", action="store_true")
    args, command = parser.parse_known_args()
    from etl.commands import add_run_parser, run_main

    etl = argparse.ArgumentParser(prog="python -m etl")
    add_run_parser(etl.add_subparsers(required=True))
    job = RecordingJob(args.record, args.name, args.seconds, lambda _call: args.fail)
    return run_main(etl.parse_args(command), job=job)


if __name__ == "__main__":
    sys.exit(main())
