"""The ETL scheduler on a real ZooKeeper with a stand-in for the Spark load: the schedule's timing, failures that
do not stop it, stopping, the lock between schedulers in separate processes, and its Prometheus metrics."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from etl.config import EtlConfig
from etl.lock import EtlLock
from etl.schedule import Scheduler
from pipeline.etl_runs import RunHistory
from pipeline.zk.client import connect
from tests.support.etl_schedule_jobs import (BYTES, ROWS, GatedJob, RecordingJob, ScheduleProcess, read_spans,
                                             started)
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.zookeeper import expire_session

GROUP = "sched"


def make_config(zk_connect: str, warehouse: Path, **settings: Any) -> EtlConfig:
    return EtlConfig({"zookeeper.connect": zk_connect, "warehouse.dir": str(warehouse), "group.id": GROUP,
                      **settings})


class Running:
    """A Scheduler's run() on a thread; stopped (and joined) by the test or at its end."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.thread = threading.Thread(target=scheduler.run, daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.scheduler.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the scheduler did not stop"


@pytest.fixture
def run_scheduler() -> Iterator[Callable[[Scheduler], Running]]:
    running: list[Running] = []

    def start(scheduler: Scheduler) -> Running:
        running.append(Running(scheduler))
        return running[-1]

    yield start
    for each in running:
        each.stop()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples served at /metrics: {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scraped_when(port: int, condition: Callable[[dict], bool]) -> Callable[[], dict]:
    """For wait_until: the samples once the endpoint serves and ``condition`` holds of them, else {}."""
    def poll() -> dict:
        try:
            samples = scrape(port)
        except urllib.error.URLError:  # not serving yet
            return {}
        return samples if condition(samples) else {}
    return poll


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted({"group": GROUP, **labels}.items()))))


def test_runs_start_every_period_and_a_failed_run_does_not_stop_the_schedule(
        zk_connect: str, tmp_path: Path, run_scheduler: Callable[[Scheduler], Running]) -> None:
    record, every = tmp_path / "runs.txt", 0.8
    job = RecordingJob(record, "a", seconds=0.4, fail=lambda call: call == 1)
    port = free_port()
    running = run_scheduler(Scheduler(make_config(zk_connect, tmp_path / "wh", **{"schedule.every": every,
                                                                                   "metrics.port": port}), job))
    wait_until(lambda: len(read_spans(record)) >= 4, timeout=10.0, message="four runs")
    running.stop()
    spans = read_spans(record)
    gaps = [later.start - earlier.start for earlier, later in zip(spans, spans[1:])]
    assert all(every - 0.02 <= gap < every + 0.2 for gap in gaps), f"not started every {every}s: {gaps}"
    assert all(span.held_at_end for span in spans)
    outcomes = [run.outcome for run in RunHistory(tmp_path / "wh", GROUP).runs()][::-1]
    assert outcomes[:4] == ["succeeded", "failed", "succeeded", "succeeded"]


def test_a_run_longer_than_the_period_is_followed_at_once_never_overlapped(
        zk_connect: str, tmp_path: Path, run_scheduler: Callable[[Scheduler], Running]) -> None:
    record = tmp_path / "runs.txt"
    running = run_scheduler(Scheduler(make_config(zk_connect, tmp_path / "wh", **{"schedule.every": 0.1}),
                                      RecordingJob(record, "a", seconds=0.4)))
    wait_until(lambda: len(read_spans(record)) >= 3, timeout=10.0, message="three runs")
    running.stop()
    spans = read_spans(record)
    for earlier, later in zip(spans, spans[1:]):
        assert 0 <= later.start - earlier.end < 0.3, spans


def test_stop_lets_the_run_in_progress_finish_and_starts_no_other(
        zk_connect: str, tmp_path: Path, run_scheduler: Callable[[Scheduler], Running]) -> None:
    record = tmp_path / "runs.txt"
    running = run_scheduler(Scheduler(make_config(zk_connect, tmp_path / "wh", **{"schedule.every": 0.1}),
                                      RecordingJob(record, "a", seconds=1.0)))
    wait_until(lambda: started(record) == 1, message="the first run to start")
    running.stop()
    assert started(record) == 1 and len(read_spans(record)) == 1, record.read_text()


def test_stop_while_another_holds_the_lock_ends_the_scheduler_without_a_run(
        zk_connect: str, tmp_path: Path, run_scheduler: Callable[[Scheduler], Running]) -> None:
    client = connect(zk_connect)
    try:
        holder = EtlLock(client, GROUP)
        assert holder.acquire(threading.Event())
        record = tmp_path / "runs.txt"
        running = run_scheduler(Scheduler(make_config(zk_connect, tmp_path / "wh"), RecordingJob(record, "a")))
        wait_until(lambda: len(client.get_children(holder.path)) == 2, message="the scheduler queued for the lock")
        running.stop(timeout=5.0)
        assert started(record) == 0
    finally:
        client.stop()
        client.close()


def test_two_scheduler_processes_on_one_zookeeper_never_run_at_once_and_both_run(zk_connect: str,
                                                                                 tmp_path: Path) -> None:
    record = tmp_path / "runs.txt"
    args = ["--zookeeper", zk_connect, "--warehouse", str(tmp_path / "wh"), "--group", GROUP, "--every", "0.3s"]
    schedulers = [ScheduleProcess(tmp_path / f"{name}.log", record, name, args, seconds=0.25) for name in "ab"]
    try:
        wait_until(lambda: all(s.alive() for s in schedulers)
                   and {span.name for span in read_spans(record)} == {"a", "b"}
                   and len(read_spans(record)) >= 8, timeout=30.0,
                   message=lambda: f"runs of both schedulers: {read_spans(record)}")
        assert [s.stop() for s in schedulers] == [0, 0]
    finally:
        for scheduler in schedulers:
            scheduler.kill()
    spans = read_spans(record)
    for earlier, later in zip(spans, spans[1:]):
        assert later.start >= earlier.end, f"{earlier} overlaps {later}"
    assert all(span.held_at_end for span in spans)
    assert started(record) == len(spans), "a run cut short by the stop"


def test_sigterm_during_a_run_lets_it_finish_then_exits_0(zk_connect: str, tmp_path: Path) -> None:
    record = tmp_path / "runs.txt"
    args = ["--zookeeper", zk_connect, "--warehouse", str(tmp_path / "wh"), "--group", GROUP, "--every", "0.1s"]
    scheduler = ScheduleProcess(tmp_path / "schedule.log", record, "a", args, seconds=1.5)
    try:
        wait_until(lambda: scheduler.alive() and started(record) == 1, timeout=15.0, message="the first run to start")
        assert scheduler.stop() == 0, scheduler.log_path.read_text()
    finally:
        scheduler.kill()
    assert started(record) == 1 and len(read_spans(record)) == 1, record.read_text()
    assert len(RunHistory(tmp_path / "wh", GROUP).runs()) == 1


def test_metrics_after_runs_and_after_a_restart_from_the_history(
        zk_connect: str, tmp_path: Path, run_scheduler: Callable[[Scheduler], Running]) -> None:
    record, port = tmp_path / "runs.txt", free_port()
    config = make_config(zk_connect, tmp_path / "wh", **{"schedule.every": 0.2, "metrics.port": port,
                                                         "metrics.host": "127.0.0.1"})
    first_gate = threading.Event()
    first = run_scheduler(Scheduler(config, GatedJob(record, first_gate, free_calls=3, fail=lambda call: call >= 2)))
    # Three runs (succeeded, succeeded, failed), then the fourth holds still while the metrics are read. (A run's
    # record ends before the scheduler counts it: the third counted and one in progress means the fourth began.)
    samples = wait_until(scraped_when(port, lambda got: len(read_spans(record)) == 3
                                      and value(got, "etl_run_duration_seconds_count") == 3
                                      and value(got, "etl_run_in_progress") == 1),
                         message="three runs done and the fourth loading")
    assert value(samples, "etl_runs_total", outcome="succeeded") == 2
    assert value(samples, "etl_runs_total", outcome="failed") == 1
    assert value(samples, "etl_runs_total", outcome="nothing-new") == 0
    assert value(samples, "etl_consecutive_failures") == 1
    success = RunHistory(tmp_path / "wh", GROUP).last_success()
    assert success is not None and value(samples, "etl_last_success_timestamp_seconds") == success.finished_at
    assert value(samples, "etl_rows_total") == 2 * ROWS and value(samples, "etl_bytes_total") == 2 * BYTES
    assert value(samples, "etl_skipped_offsets_total", topic="t", partition="1") == 2 * 3
    assert value(samples, "etl_last_run_rows") == 0 and value(samples, "etl_last_run_first_task_seconds") == 0.1
    assert value(samples, "etl_run_duration_seconds_count") == 3
    assert first.scheduler.metrics._server.address == ("127.0.0.1", port), "listens where it is told only"
    first_gate.set()
    first.stop()
    runs = RunHistory(tmp_path / "wh", GROUP).runs()
    assert [run.outcome for run in runs] == ["failed", "failed", "succeeded", "succeeded"]

    # A restarted scheduler exports what the history says before its first run has finished.
    gate = threading.Event()
    restarted = run_scheduler(Scheduler(config, GatedJob(record, gate)))
    after = wait_until(scraped_when(port, lambda got: value(got, "etl_run_in_progress") == 1),
                       message="the restarted scheduler serving metrics during its first run")
    assert value(after, "etl_last_success_timestamp_seconds") == success.finished_at
    assert value(after, "etl_last_run_timestamp_seconds") == runs[0].finished_at
    assert value(after, "etl_consecutive_failures") == 2
    assert value(after, "etl_runs_total", outcome="succeeded") == 0
    gate.set()
    wait_until(scraped_when(port, lambda got: value(got, "etl_consecutive_failures") == 0),
               message="the success resetting it")
    restarted.stop()


def test_a_run_whose_session_expires_sees_the_lock_lost_and_the_next_run_holds_it_again(
        zk_connect: str, tmp_path: Path, run_scheduler: Callable[[Scheduler], Running]) -> None:
    record, gate = tmp_path / "runs.txt", threading.Event()
    client = connect(zk_connect)
    try:
        running = run_scheduler(Scheduler(make_config(zk_connect, tmp_path / "wh", **{"schedule.every": 0.1}),
                                          GatedJob(record, gate, free_calls=0), client=client))
        wait_until(lambda: running.scheduler.runs == 1, message="the first run to start")
        expire_session(client)
        gate.set()
        wait_until(lambda: len(read_spans(record)) >= 2, message="a run after the expiry")
        running.stop()
        spans = read_spans(record)
        assert [span.held_at_end for span in spans[:2]] == [False, True]
    finally:
        client.stop()
        client.close()
