"""`python -m etl run`: ETL runs one after another, each under the ETL lock, until told to stop.

A run starts ``schedule.every`` after the previous one started (right after it when it took longer), so runs of
one scheduler never overlap, and the ZooKeeper lock keeps the runs of several schedulers of one group apart. A
failed run is one line in the log and the schedule goes on: a run that keeps failing (offsets lost to retention,
say) fails again at every turn, which is what the metrics and their alerts are there for. When the stop event is
set the run in progress finishes and no other starts.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Any, Callable, TextIO

from kazoo.client import KazooClient

from etl.config import EtlConfig
from etl.lock import EtlLock, Job, LockWaitInterrupted
from etl.metrics import EtlMetrics
from etl.progress import TerminalProgress
from pipeline.etl_runs import FAILED, RunHistory, RunReport
from pipeline.zk.client import connect

__all__ = ["Scheduler", "SparkJob", "one_line"]

log = logging.getLogger(__name__)


def one_line(text: str) -> str:
    """The first line of an error (a Spark error carries its whole Java stack trace)."""
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


class SparkJob:
    """The real run: ``etl.job.run_once`` on one SparkSession, built when a run first has something to load and
    kept until :meth:`close`, with its progress on ``progress`` (None: no progress display)."""

    def __init__(self, progress: TextIO | None = sys.stderr) -> None:
        self.progress = progress
        self._spark: Any = None

    def __call__(self, config: EtlConfig, *, still_locked: Callable[[], bool]) -> RunReport:
        from etl.job import run_once

        with contextlib.ExitStack() as showing:
            def session() -> Any:
                if self._spark is None:
                    from etl.spark import build_session

                    self._spark = build_session(config)
                if self.progress is not None:
                    showing.enter_context(TerminalProgress(self._spark.sparkContext, self.progress))
                return self._spark

            return run_once(config, session, still_locked=still_locked)

    def close(self) -> None:
        if self._spark is not None:
            from etl.spark import stop_session

            stop_session(self._spark)
            self._spark = None


class Scheduler:
    """Runs ``job`` every ``schedule.every`` under the ETL lock until ``stop`` is set; see the module's text.

    ``job`` defaults to a :class:`SparkJob` (closed when the scheduler ends); ``client`` to a connection to
    ``zookeeper.connect`` made by :meth:`run` and closed when it ends. Metrics are served on ``metrics.port``
    when it is set (``metrics_port`` is the port served, useful with 0).
    """

    def __init__(self, config: EtlConfig, job: Job | None = None, stop: threading.Event | None = None, *,
                 client: KazooClient | None = None) -> None:
        self.config = config
        self.stop = stop or threading.Event()
        self._own_job = job is None
        self.job: Job = SparkJob() if job is None else job
        self._client = client
        self.history = RunHistory(config.warehouse, config["group.id"], config["history.keep"])
        self.metrics = EtlMetrics(config["group.id"])
        self.metrics.restore(self.history)
        self.metrics_port: int | None = None
        self.runs = 0

    def run(self) -> None:
        """Run until the stop event is set; returns once the run in progress (if any) has finished."""
        client = self._client or connect(self.config["zookeeper.connect"], security=self.config.zookeeper_security)
        lock = EtlLock(client, self.config["group.id"])
        every = self.config["schedule.every"]
        try:
            if self.config["metrics.port"] is not None:
                self.metrics_port = self.metrics.serve(self.config["metrics.port"], self.config["metrics.host"])
            log.info("running the ETL of group %s every %gs", self.config["group.id"], every)
            next_start = time.monotonic()
            while not self.stop.wait(max(0.0, next_start - time.monotonic())):
                try:
                    with lock.holding(self.stop):
                        next_start = time.monotonic() + every
                        self._run_once(lock)
                except LockWaitInterrupted:
                    break
        finally:
            self.metrics.close()
            lock.close()
            if self._client is None:
                client.stop()
                client.close()
            if self._own_job:
                close = getattr(self.job, "close", None)
                if close is not None:
                    close()
        log.info("stopped")

    def _run_once(self, lock: EtlLock) -> None:
        self.runs += 1
        self.metrics.run_started()
        started = time.time()
        report: RunReport | None = None
        try:
            report = self.job(self.config, still_locked=lock.held)
        except Exception as error:  # the run failed: one line, and the schedule goes on
            report = self._recorded_failure(started)
            if report is not None:
                log.error("run %s failed after %.1fs: %s", report.run_id, report.duration_s or 0.0,
                          one_line(report.error or str(error)))
            else:
                log.error("run failed: %s: %s", type(error).__name__, one_line(str(error)))
        else:
            log.info("run %s %s: %d rows, %d bytes, %d ranges, %d offsets skipped, %d records quarantined, %.1fs",
                     report.run_id, report.outcome, report.rows, report.bytes, len(report.ranges),
                     sum(s.count for s in report.skipped), report.quarantined_records, report.duration_s or 0.0)
            if report.topic_errors:
                log.error("run %s could not load %s: %s", report.run_id, ", ".join(sorted(report.topic_errors)),
                          one_line(report.error or ""))
        finally:
            self.metrics.run_finished(report)

    def _recorded_failure(self, started: float) -> RunReport | None:
        """The failed run's report, when the job recorded one before raising."""
        newest = self.history.runs(limit=1)
        if newest and newest[0].outcome == FAILED and newest[0].started_at >= started:
            return newest[0]
        return None
