"""A reconciliation pass of the audit service looks at what changed: with many windows retained, a pass after one
window changed reconciles that window alone (and reads only its counts); windows newly past their grace and
windows whose expected tiers changed are reconciled too; a pass after nothing changed reconciles nothing.
(The readers' checkpointed counts are real; only the clusters are left out: pure logic.)"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

import audit.service
from audit.config import AuditConfig
from audit.state import CheckpointedCounts

WINDOW = 1000
NOW = 1_700_000_000_000
WINDOWS = 300


@pytest.fixture
def service(tmp_path, monkeypatch):
    config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path), "window.ms": WINDOW,
                          "grace.ms": 0})
    service = audit.service.AuditService(config)
    readers = [SimpleNamespace(counts=CheckpointedCounts(tmp_path / name, config["retain.ms"], lambda: NOW))
               for name in ("dc1-events", "dc1-audit")]
    service._readers = readers
    calls = SimpleNamespace(reconciled=[], snapshot=[])
    real_reconcile = audit.service.reconcile

    def counting_reconcile(key, *args):
        calls.reconciled.append(key)
        return real_reconcile(key, *args)
    monkeypatch.setattr(audit.service, "reconcile", counting_reconcile)
    for reader in readers:
        real_snapshot = reader.counts.snapshot

        def counting_snapshot(keys=None, real_snapshot=real_snapshot):
            copies = real_snapshot(keys)
            calls.snapshot.extend(copies)
            return copies
        reader.counts.snapshot = counting_snapshot
    service.calls = calls
    yield service
    for reader in readers:
        reader.counts.close()


def start(n: int) -> int:
    return NOW - (WINDOWS + 10 - n) * WINDOW


def count(service, tier: str, n: int, ids: list[bytes]) -> None:
    """``ids`` counted at ``tier`` in window ``n`` (the cluster tier by the events reader, the others by the
    AuditCount reader)."""
    events, audits = (r.counts for r in service._readers)
    for event_id in ids:
        key = (tier, "PageViewEvent", "dc1", start(n))
        if tier == "datacenter":
            events.count(key, 100, event_id)
        else:
            audits.count(key, 100, event_id)


def new_round(service, now: int = NOW) -> list:
    service.calls.reconciled.clear()
    service.calls.snapshot.clear()
    return service.reconcile_closed(now)


def test_a_round_after_one_window_changed_reconciles_that_window_only(service):
    ids = {n: [uuid.uuid4().bytes for _ in range(3)] for n in range(WINDOWS)}
    for n in range(WINDOWS):
        count(service, "producer", n, ids[n])
        count(service, "datacenter", n, ids[n])
    first = new_round(service)
    assert len(first) == WINDOWS and all(r.complete() for r in first)

    assert new_round(service) == [] and service.calls.reconciled == []
    assert service.calls.snapshot == []

    late = uuid.uuid4()
    count(service, "datacenter", 7, [late.bytes])  # late data, in a window reconciled already
    fresh = new_round(service)
    assert [r.key.window_start for r in fresh] == [start(7)]
    assert [k.window_start for k in service.calls.reconciled] == [start(7)]
    assert sorted(service.calls.snapshot) == [("datacenter", "PageViewEvent", "dc1", start(7)),
                                              ("producer", "PageViewEvent", "dc1", start(7))]
    (discrepancy,) = fresh[0].discrepancies
    assert (discrepancy.earlier, discrepancy.later, discrepancy.duplicated) == ("producer", "datacenter",
                                                                               {str(late): 1})
    assert service.results[fresh[0].key]["counts"] == {"producer": 3, "datacenter": 4}


def test_windows_newly_past_their_grace_and_those_a_new_tier_should_have_counted_are_reconciled(service):
    for n in range(WINDOWS):
        count(service, "producer", n, [uuid.uuid4().bytes])
    count(service, "producer", WINDOWS + 10, [uuid.uuid4().bytes])  # still open at NOW
    assert len(new_round(service)) == WINDOWS
    later = NOW + WINDOW
    assert [r.key.window_start for r in new_round(service, later)] == [start(WINDOWS + 10)]
    assert new_round(service, later) == []

    # The mirror starts counting this topic: every other closed window of it now misses the mirror's events.
    count(service, "mirror", 3, [uuid.uuid4().bytes])
    fresh = new_round(service, later)
    assert len(fresh) == WINDOWS + 1
    assert {r.key.window_start: r.completeness.get("mirror") for r in fresh}[start(4)] == 0.0


def test_a_difference_that_could_not_be_read_back_is_read_at_the_next_pass(service, monkeypatch):
    # 100 events held by dc1 and none by the offline cluster: too many for the sketches, so the audit reads the
    # window back from both clusters; the first read fails (a broker away), the next pass must try again.
    dc1, offline = object(), object()
    service._clusters = {"dc1": dc1, "offline": offline}
    ids = [uuid.uuid4() for _ in range(100)]
    count(service, "datacenter", 5, [i.bytes for i in ids])
    reads = []

    def scan_window(cluster, topic, start_ms, end_ms, slack_ms, datacenter):
        reads.append(cluster)
        if len(reads) == 1:
            raise OSError("connection refused")
        return [SimpleNamespace(event_id=str(i)) for i in ids] if cluster is dc1 else []
    monkeypatch.setattr(audit.service, "scan_window", scan_window)

    (first,) = [r for r in new_round(service) if r.key.window_start == start(5)]
    assert [d.decoded for d in first.discrepancies] == [False]
    (again,) = new_round(service)
    (named,) = again.discrepancies
    assert named.decoded and named.read and named.missing == {str(i): 1 for i in ids}
    assert new_round(service) == []
