"""`python -m etl run` (the scheduler) with the real Spark load (real ZooKeeper, broker, registry, Spark local[2]): runs
follow each other under the lock and load new offsets as they come, the metrics say so, and SIGTERM lets the
run in progress finish and exits 0 with every offset loaded exactly once."""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from pipeline.etl_runs import RunHistory
from schemas.events import load_schema
from tests.support.etl import EtlEnvironment, EtlProcess, expected_keys, page_views, warehouse_rows
from tests.support.mirror import end_offsets
from tests.support.polling import wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def env(zookeeper_server: object, tmp_path: Path) -> Iterator[EtlEnvironment]:
    environment = EtlEnvironment(zookeeper_server, tmp_path / "env")
    try:
        yield environment
    finally:
        environment.close()


def test_the_scheduler_loads_new_offsets_run_after_run_and_stops_cleanly(env: EtlEnvironment, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    env.create_topic("PageViewEvent", 2)
    schema = load_schema("PageViewEvent")
    env.produce("PageViewEvent", page_views(300), schema)
    port = free_port()
    args = ["run", *env.args(warehouse)[1:], "--every", "1s", "--metrics-port", str(port)]
    scheduler = EtlProcess(tmp_path / "schedule.log", args).start()
    try:
        history = RunHistory(warehouse, "etl")
        wait_until(lambda: scheduler.process.poll() is None and sum(r.rows for r in history.runs()) == 300, 120,
                   interval=0.5, message=lambda: f"the first 300 rows loaded:\n{scheduler.log_tail()}")
        env.produce("PageViewEvent", page_views(100, start=300), schema)
        wait_until(lambda: sum(r.rows for r in history.runs()) == 400, 120, interval=0.5,
                   message=lambda: f"the next 100 rows loaded by a later run:\n{scheduler.log_tail()}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
        assert 'etl_rows_total{group="etl"} 400.0' in metrics
        assert 'etl_runs_total{group="etl",outcome="failed"} 0.0' in metrics
        scheduler.process.send_signal(signal.SIGTERM)
        assert scheduler.wait(120) == 0, scheduler.log_tail()
    finally:
        scheduler.cleanup()
    rows = warehouse_rows(warehouse, "PageViewEvent")
    assert set(rows) == expected_keys("PageViewEvent", end_offsets(env.offline, "PageViewEvent", 2))
    runs = history.runs()
    assert len(runs) >= 2 and all(r.outcome in ("succeeded", "nothing-new") for r in runs)
