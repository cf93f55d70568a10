"""Progress of a run while Spark loads it, on a terminal: one line rewritten in place (a tty) or a plain line
every few seconds (a log file, a pipe), made from Spark's status tracker by a thread of its own.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["Progress", "TerminalProgress", "read_progress"]


@dataclass(frozen=True)
class Progress:
    """Tasks of the active Spark jobs, over all their stages."""

    jobs: int
    stages: int
    stages_done: int
    tasks: int
    completed: int
    active: int
    failed: int

    def describe(self, elapsed_s: float) -> str:
        clock = f"{int(elapsed_s) // 60}:{int(elapsed_s) % 60:02d}"
        if not self.jobs:
            return f"etl: waiting for Spark tasks, {clock}"
        return (f"etl: {self.completed}/{self.tasks} tasks done, {self.active} running, {self.failed} failed "
                f"(stage {min(self.stages_done + 1, self.stages)}/{self.stages} of {self.jobs} job"
                f"{'s' if self.jobs != 1 else ''}), {clock}")


def read_progress(tracker: Any) -> Progress:
    """What ``tracker`` (``SparkContext.statusTracker()``) says of the jobs running now."""
    jobs = stages = stages_done = tasks = completed = active = failed = 0
    for job_id in tracker.getActiveJobsIds():
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        jobs += 1
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:  # skipped, or already forgotten
                continue
            stages += 1
            stages_done += stage.numCompletedTasks >= stage.numTasks
            tasks += stage.numTasks
            completed += stage.numCompletedTasks
            active += stage.numActiveTasks
            failed += stage.numFailedTasks
    return Progress(jobs, stages, stages_done, tasks, completed, active, failed)


class TerminalProgress:
    """A context manager showing the progress of ``spark_context``'s jobs on ``stream`` for its block.

    On a tty the line is rewritten every ``interval_s`` and erased at the end; elsewhere a line is written every
    ``plain_every_s`` while something changed.
    """

    def __init__(self, spark_context: Any, stream: TextIO = sys.stderr, *, interval_s: float = 0.5,
                 plain_every_s: float = 5.0) -> None:
        self._tracker = spark_context.statusTracker()
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.every_s = interval_s if self.tty else plain_every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._width = 0
        self._last: Progress | None = None

    def __enter__(self) -> "TerminalProgress":
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="etl-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.tty and self._width:
            self._write("\r" + " " * self._width + "\r")

    def _loop(self) -> None:
        from py4j.protocol import Py4JError

        while not self._stop.wait(self.every_s):
            try:
                progress = read_progress(self._tracker)
            except Py4JError:  # the SparkContext stopped under the run: the run reports that, not the display
                return
            if not self.tty and progress == self._last:
                continue
            self._last = progress
            text = progress.describe(time.monotonic() - self._started)
            if self.tty:
                self._write("\r" + text.ljust(self._width))
                self._width = max(self._width, len(text))
            else:
                self._write(text + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
