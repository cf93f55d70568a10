"""The warehouse tier is counted by the ETL's runs, minutes apart: a window's warehouse counts are compared only
once a run that started after the offline tier was ready for the window has finished (its counts had grace to
arrive: without a reader of the offline cluster, the offline tier is ready by the clock, at the window's end plus
grace), so windows the ETL has not loaded yet are pending there, not lost; once covered, a window missing events at
the warehouse names them. (The readers' checkpointed counts and the run history are real; no cluster: pure
logic.)"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from audit.config import AuditConfig
from audit.reconcile import INCOMPLETE, PENDING
from audit.service import AuditService
from audit.state import CheckpointedCounts
from pipeline.etl_runs import FAILED, SUCCEEDED, RunHistory, RunReport

WINDOW = 1000
GRACE = 2000
NOW = 1_700_000_000_000


@pytest.fixture
def service(tmp_path):
    config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path / "audit"),
                          "window.ms": WINDOW, "grace.ms": GRACE, "warehouse.dir": str(tmp_path / "warehouse")})
    service = AuditService(config)
    service._readers = [SimpleNamespace(counts=CheckpointedCounts(tmp_path / "audit" / name, config["retain.ms"],
                                                                  lambda: NOW))
                        for name in ("dc1-events", "dc1-audit")]
    service.history = RunHistory(tmp_path / "warehouse", "etl")
    yield service
    for reader in service._readers:
        reader.counts.close()


def count(service, tier: str, window_start: int, ids: list[bytes]) -> None:
    events, audits = (r.counts for r in service._readers)
    for event_id in ids:
        (events if tier == "datacenter" else audits).count((tier, "PageViewEvent", "dc1", window_start), 100,
                                                           event_id)


def run(service, name: str, started_ms: int, finished_ms: int, outcome: str = SUCCEEDED) -> None:
    report = RunReport(name, "etl", started_ms / 1000)
    report.finish(outcome, finished_ms / 1000, None if outcome == SUCCEEDED else "boom")
    service.history.record(report)


def results(service, now: int) -> dict[int, dict]:
    return {r.key.window_start: r for r in service.reconcile_closed(now)}


def test_the_warehouse_is_pending_until_an_etl_run_covers_the_window_then_its_losses_are_named(service):
    first, second, third = NOW - 10 * WINDOW, NOW - 9 * WINDOW, NOW - 8 * WINDOW
    ids = {start: [uuid.uuid4().bytes for _ in range(3)] for start in (first, second, third)}
    for start, events in ids.items():
        count(service, "producer", start, events)
        count(service, "datacenter", start, events)
    # An earlier run loaded two of the first window's events (it started before the window was over).
    count(service, "warehouse", first, ids[first][:2])

    pending = results(service, NOW)
    assert sorted(pending) == [first, second, third]
    assert all(r.state == PENDING and list(r.pending) == ["warehouse"] and r.lost == {} for r in pending.values())
    assert pending[first].counts["warehouse"] == 2 and pending[second].counts["warehouse"] == 0
    assert "an ETL run started after" in pending[first].pending["warehouse"]["waitingFor"]

    # A run that failed, and one whose counts are still within grace, cover nothing.
    run(service, "failed", NOW - 5 * WINDOW, NOW - 4 * WINDOW, FAILED)
    run(service, "recent", NOW - 5 * WINDOW - 500, NOW - WINDOW)
    assert results(service, NOW) == {}

    # Covered: the run started after the first two windows ended plus grace (not the third's).
    covered = results(service, NOW + WINDOW)
    assert sorted(covered) == [first, second]
    assert covered[first].lost == {"warehouse": {str(uuid.UUID(bytes=ids[first][2])): 1}}
    assert covered[second].counts["warehouse"] == 0 and covered[second].completeness["warehouse"] == 0.0
    assert covered[second].state == INCOMPLETE and len(covered[second].lost["warehouse"]) == 3

    # The next run loads the rest; the windows it covers are compared again, complete.
    count(service, "warehouse", first, ids[first][2:])
    count(service, "warehouse", second, ids[second])
    count(service, "warehouse", third, ids[third])
    run(service, "next", NOW - 2 * WINDOW + 500, NOW)
    assert {start: r.complete() for start, r in results(service, NOW + GRACE).items()} == {
        first: True, second: True, third: True}


def test_without_a_warehouse_the_tier_is_compared_as_it_counts(tmp_path):
    config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path), "window.ms": WINDOW,
                          "grace.ms": GRACE})
    service = AuditService(config)
    service._readers = [SimpleNamespace(counts=CheckpointedCounts(tmp_path / name, config["retain.ms"], lambda: NOW))
                        for name in ("dc1-events", "dc1-audit")]
    try:
        event = uuid.uuid4().bytes
        count(service, "producer", NOW - 10 * WINDOW, [event, uuid.uuid4().bytes])
        count(service, "warehouse", NOW - 10 * WINDOW, [event])
        (result,) = service.reconcile_closed(NOW)
        assert result.counts["warehouse"] == 1 and not result.complete()
    finally:
        for reader in service._readers:
            reader.counts.close()
