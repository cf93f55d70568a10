"""The ETL's Prometheus metrics: counting runs, quarantined records and upkeep, starting from a recorded run
history, and the address they are served on."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from etl.config import EtlConfig
from etl.metrics import EtlMetrics
from pipeline.etl_runs import (
    FAILED,
    NOTHING_NEW,
    PARTIAL,
    SUCCEEDED,
    RangeReport,
    RunHistory,
    RunReport,
    SkippedOffsets,
)

GROUP = "g"


def report(run_id: str, started: float, outcome: str, rows: int = 0, skipped: int = 0) -> RunReport:
    run = RunReport(run_id=run_id, group=GROUP, started_at=started,
                    ranges=[RangeReport("t", 0, 0, rows, rows, rows * 100)] if rows else [],
                    skipped=[SkippedOffsets("t", 2, 0, skipped)] if skipped else [])
    run.finish(outcome, started + 2.0, "boom" if outcome in (FAILED, PARTIAL) else None)
    return run


def sample(metrics: EtlMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"group": GROUP, **labels})


def test_a_new_metrics_set_restores_the_last_runs_from_the_history(tmp_path: Path) -> None:
    history = RunHistory(tmp_path, GROUP)
    for run in (report("a", 100.0, SUCCEEDED, rows=5), report("b", 200.0, SUCCEEDED, rows=7),
                report("c", 300.0, NOTHING_NEW), report("d", 400.0, FAILED), report("e", 500.0, FAILED)):
        history.record(run)
    metrics = EtlMetrics(GROUP)
    metrics.restore(history)
    assert sample(metrics, "etl_last_success_timestamp_seconds") == 202.0
    assert sample(metrics, "etl_last_run_timestamp_seconds") == 502.0
    assert sample(metrics, "etl_last_run_duration_seconds") == 2.0
    assert sample(metrics, "etl_consecutive_failures") == 2
    assert sample(metrics, "etl_runs_total", outcome=SUCCEEDED) == 0, "counters count this process's runs"


def test_an_empty_history_exports_no_last_success(tmp_path: Path) -> None:
    metrics = EtlMetrics(GROUP)
    metrics.restore(RunHistory(tmp_path, GROUP))
    assert sample(metrics, "etl_last_success_timestamp_seconds") is None
    assert sample(metrics, "etl_runs_total", outcome=FAILED) == 0


def test_runs_are_counted_by_outcome_with_their_rows_bytes_and_skipped_offsets() -> None:
    metrics = EtlMetrics(GROUP)
    metrics.run_started()
    assert sample(metrics, "etl_run_in_progress") == 1
    metrics.run_finished(report("a", 10.0, SUCCEEDED, rows=3, skipped=4))
    metrics.run_finished(report("b", 20.0, FAILED))
    metrics.run_finished(None)  # failed before it had a report
    assert sample(metrics, "etl_run_in_progress") == 0
    assert sample(metrics, "etl_runs_total", outcome=SUCCEEDED) == 1
    assert sample(metrics, "etl_runs_total", outcome=FAILED) == 2
    assert sample(metrics, "etl_consecutive_failures") == 2
    assert sample(metrics, "etl_rows_total") == 3 and sample(metrics, "etl_bytes_total") == 300
    assert sample(metrics, "etl_skipped_offsets_total", topic="t", partition="2") == 4
    assert sample(metrics, "etl_last_success_timestamp_seconds") == 12.0
    assert sample(metrics, "etl_last_run_timestamp_seconds") == 22.0 and sample(metrics, "etl_last_run_rows") == 0
    assert sample(metrics, "etl_run_duration_seconds_count") == 2
    metrics.run_finished(report("c", 30.0, NOTHING_NEW))
    assert sample(metrics, "etl_consecutive_failures") == 0
    assert sample(metrics, "etl_last_success_timestamp_seconds") == 12.0


def test_quarantined_records_topics_not_loaded_and_upkeep_are_counted_and_a_partial_run_is_a_failure() -> None:
    metrics = EtlMetrics(GROUP)
    partial = report("a", 10.0, PARTIAL, rows=3)
    partial.quarantined = {"t": {"null value": 2, "unknown schema id": 1}}
    partial.topic_errors = {"u": "no reader schema"}
    partial.maintenance = {"partitions_expired": 4, "files_compacted": 9}
    partial.maintenance_error = "compacting t: boom"
    metrics.run_finished(partial)
    assert sample(metrics, "etl_records_quarantined_total", topic="t", reason="null value") == 2
    assert sample(metrics, "etl_records_quarantined_total", topic="t", reason="unknown schema id") == 1
    assert sample(metrics, "etl_topic_failures_total", topic="u") == 1
    assert sample(metrics, "etl_partitions_expired_total") == 4 and sample(metrics, "etl_files_compacted_total") == 9
    assert sample(metrics, "etl_maintenance_failures_total") == 1
    assert sample(metrics, "etl_runs_total", outcome=PARTIAL) == 1 and sample(metrics, "etl_consecutive_failures") == 1
    assert sample(metrics, "etl_last_success_timestamp_seconds") is None, "a topic was not loaded"
    assert sample(metrics, "etl_rows_total") == 3


def test_the_metrics_server_listens_on_the_address_it_is_given() -> None:
    metrics = EtlMetrics(GROUP)
    port = metrics.serve(0, "127.0.0.1")
    try:
        assert metrics._server.address == ("127.0.0.1", port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert b"etl_records_quarantined_total" in response.read()
    finally:
        metrics.close()
    assert EtlConfig({"zookeeper.connect": "zk", "warehouse.dir": "w"})["metrics.host"] == "0.0.0.0"
