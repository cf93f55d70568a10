"""The audit service's pass over what the readers counted, as docs/accounting.md says: the producer records' failures
and the tiers' quarantine records go through the checkpointed counts into the reconciliation (failed events lost at
the producer tier unless the cluster got them after all, quarantined ones named with their reason); a tier is
compared only once it is ready, pending meanwhile (audit_pending_windows, the oldest one's age) and never lost; an
event no producer created is told from a duplicate by reading the datacenter cluster back (a fake scan here); the
metrics count what is named once. (Real counts and readiness rules, followers fed by hand; no cluster.)"""

from __future__ import annotations

import base64
import uuid
from types import SimpleNamespace

import pytest

import audit.service
from audit.config import AuditConfig
from audit.readiness import Follower, Readiness
from audit.records import read_audit_count
from audit.service import AuditService
from audit.state import CheckpointedCounts
from audit.window_scan import Found
from pipeline.auditing.sketch import EventSketch

WINDOW = 1000
GRACE = 2000
NOW = 1_700_000_000_000
START = NOW - 10 * WINDOW


@pytest.fixture
def service(tmp_path):
    config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "offline.zookeeper.connect": "127.0.0.1:1",
                          "state.dir": str(tmp_path), "window.ms": WINDOW, "grace.ms": GRACE})
    service = AuditService(config)
    service._readers = [SimpleNamespace(counts=CheckpointedCounts(tmp_path / name, config["retain.ms"], lambda: NOW))
                        for name in ("dc1-events", "dc1-audit", "offline-events", "offline-audit")]
    yield service
    for reader in service._readers:
        reader.counts.close()


def reader(service, name: str) -> CheckpointedCounts:
    return next(r.counts for r in service._readers if r.counts.path.name == name)


def hold(service, cluster: str, tier: str, ids: list[str]) -> None:
    for event_id in ids:
        reader(service, f"{cluster}-events").count((tier, "PageViewEvent", "dc1", START), 100, bytes.fromhex(
            event_id.replace("-", "")))


def publish(service, cluster: str, tier: str, ids: list[str], **properties: str) -> None:
    sketch = EventSketch()
    sketch.add(ids)
    record = read_audit_count({"topic": "PageViewEvent", "tier": tier, "windowStart": START,
                               "windowEnd": START + WINDOW, "datacenter": "dc1", "count": len(ids),
                               "bytes": 100 * len(ids), "sketch": sketch.to_bytes(), "properties": properties}, WINDOW)
    for measure, counted in record.measures:
        reader(service, f"{cluster}-audit").add((measure, "PageViewEvent", "dc1", START), counted)


def metric(service, name: str, **labels: str) -> float | None:
    return service.metrics.registry.get_sample_value(name, labels)


def test_failures_and_quarantines_are_named_and_counted_once(service):
    acknowledged, failed = [str(uuid.uuid4()) for _ in range(20)], [str(uuid.uuid4()) for _ in range(3)]
    sketch = EventSketch()
    sketch.add(failed)
    publish(service, "dc1", "producer", acknowledged, created="23", failed="3", failedBytes="300",
            failedSketch=base64.b64encode(sketch.to_bytes()).decode())
    held = acknowledged + failed[:1]  # the broker got one of them after all
    hold(service, "dc1", "datacenter", held)
    publish(service, "offline", "mirror", held[1:])
    publish(service, "offline", "mirror", held[:1], quarantined="too large for the target")
    hold(service, "offline", "offline", held[1:])
    (result,) = service.reconcile_closed(NOW)
    assert result.counts == {"producer": 23, "datacenter": 21, "mirror": 20, "offline": 20}
    assert result.lost == {"producer": dict.fromkeys(sorted(failed[1:]), 1)} and result.identity.holds
    assert [(q.tier, q.reason, q.ids) for q in result.quarantined] == [
        ("mirror", "too large for the target", {held[0]: 1})]
    assert metric(service, "audit_events_lost_total", topic="PageViewEvent", tier="producer") == 2
    assert metric(service, "audit_events_quarantined_total", topic="PageViewEvent", tier="mirror",
                  reason="too large for the target") == 1
    assert service.results[result.key]["lost"] == {"producer": dict.fromkeys(sorted(failed[1:]), 1)}
    # A count that changes nothing named counts nothing again.
    hold(service, "dc1", "datacenter", [])
    publish(service, "dc1", "producer", [])
    service.reconcile_closed(NOW + 1)
    assert metric(service, "audit_events_lost_total", topic="PageViewEvent", tier="producer") == 2


def test_a_tier_behind_is_pending_with_its_age_never_lost_until_it_is_ready(service):
    followers = {name: Follower(name) for name in ("dc1-events", "dc1-audit", "mirror", "offline-events",
                                                   "offline-audit")}
    service.readiness = Readiness(GRACE, "AuditCount", datacenter_events={"dc1": followers["dc1-events"]},
                                  datacenter_audit={"dc1": followers["dc1-audit"]},
                                  mirror={"dc1": followers["mirror"]}, offline_events=followers["offline-events"],
                                  offline_audit=followers["offline-audit"])
    ids = [str(uuid.uuid4()) for _ in range(10)]
    publish(service, "dc1", "producer", ids)
    hold(service, "dc1", "datacenter", ids)
    hold(service, "offline", "offline", ids[:4])  # the mirror is far behind
    due = START + WINDOW + GRACE
    for name, follower in followers.items():
        follower.sample(due, "AuditCount" if name.endswith("audit") else "PageViewEvent", {0: 10})
    for name in ("dc1-events", "dc1-audit", "offline-audit"):
        followers[name].advance({("AuditCount" if name.endswith("audit") else "PageViewEvent", 0): 10}, due + 1)
    followers["mirror"].advance({("PageViewEvent", 0): 4}, due + 1)
    followers["offline-events"].advance({("PageViewEvent", 0): 4}, due + 1)
    now = due + 60_000
    (pending,) = service.reconcile_closed(now)
    assert pending.state == "pending" and sorted(pending.pending) == ["offline"] and pending.lost == {}
    assert pending.pending["offline"]["lagRecords"] == 6
    assert metric(service, "audit_pending_windows", tier="offline") == 1
    assert metric(service, "audit_oldest_pending_window_age_seconds", tier="offline") == (now - START - WINDOW) / 1000
    assert metric(service, "audit_events_lost_total", topic="PageViewEvent", tier="offline") is None
    # The mirror catches up and commits; the offline cluster holds everything as of its commit.
    hold(service, "offline", "offline", ids[4:])
    followers["mirror"].advance({("PageViewEvent", 0): 10}, now + 10)
    for name, follower in followers.items():
        follower.sample(now + 20, "AuditCount" if name.endswith("audit") else "PageViewEvent", {0: 10})
    for name in ("offline-events", "offline-audit"):
        followers[name].advance({("AuditCount" if name.endswith("audit") else "PageViewEvent", 0): 10}, now + 30)
    (complete,) = service.reconcile_closed(now + 30)
    assert complete.state == "complete" and service.results[complete.key]["ready"]["offline"] == now + 20
    assert metric(service, "audit_pending_windows", tier="offline") == 0
    assert metric(service, "audit_events_lost_total", topic="PageViewEvent", tier="offline") is None


def test_the_producer_tier_is_pending_while_its_records_say_events_are_still_in_flight(service):
    ids = [str(uuid.uuid4()) for _ in range(10)]
    # The producer published its window with 4 events still being retried (a broker outage it rides out).
    publish(service, "dc1", "producer", ids[:6], created="10", failed="0", unsettled="4")
    hold(service, "dc1", "datacenter", ids)
    hold(service, "offline", "offline", ids)
    publish(service, "offline", "mirror", ids)
    (result,) = service.reconcile_closed(NOW)
    assert result.state == "pending" and "producer" in result.pending and not result.lost
    assert result.pending["producer"]["lagRecords"] == 4 and not result.duplicated
    assert metric(service, "audit_events_duplicated_total", topic="PageViewEvent", tier="datacenter") is None
    # They settle: the producer's next record of the window says so, and the window is complete.
    publish(service, "dc1", "producer", ids[6:], created="0", failed="0", unsettled="-4")
    (result,) = service.reconcile_closed(NOW + 1)
    assert result.state == "complete" and not result.pending and result.counts["producer"] == 10
    assert result.identity is not None and result.identity.holds


def found(ids: list[str]) -> list[Found]:
    return [Found(event_id, "dc1", START, "PageViewEvent", 0, offset) for offset, event_id in enumerate(ids)]


def test_an_event_no_producer_created_is_named_unexpected_once_the_datacenter_cluster_is_read_back(service,
                                                                                                  monkeypatch):
    # dc1 holds the events created, one of them twice (a retry), and one no audited producer created (another
    # producer wrote it, as `chaos poison-record` does); the mirror copies all on.
    ids = [str(uuid.uuid4()) for _ in range(20)]
    foreign, twice = str(uuid.uuid4()), ids[3]
    held = ids + [twice, foreign]
    publish(service, "dc1", "producer", ids, created="20", failed="0")
    hold(service, "dc1", "datacenter", held)
    publish(service, "offline", "mirror", held)
    hold(service, "offline", "offline", held)
    dc1 = object()
    service._clusters = {"dc1": dc1, "offline": object()}
    scans = []

    def scan_window(cluster, topic, start_ms, end_ms, slack_ms, datacenter):
        assert (cluster, topic, start_ms, end_ms, datacenter) == (dc1, "PageViewEvent", START, START + WINDOW, "dc1")
        scans.append(cluster)
        if len(scans) == 1:
            raise OSError("connection refused")
        # The read does not see the retried copy (appended past its horizon): the audit's own sketch of dc1 says so.
        return found(ids + [foreign])
    monkeypatch.setattr(audit.service, "scan_window", scan_window)

    # dc1 cannot be read now: both stay named duplicated, and the window is read again at the next pass.
    (first,) = service.reconcile_closed(NOW)
    assert first.duplicated == {"datacenter": {twice: 1, foreign: 1}} and first.unexpected == {}
    (result,) = service.reconcile_closed(NOW + 1)
    assert len(scans) == 2
    assert result.duplicated == {"datacenter": {twice: 1}} and result.unexpected == {"datacenter": {foreign: 1}}
    assert result.lost == {} and result.identity.holds and result.identity.unexpected == 1
    data = service.results[result.key]
    assert data["unexpected"] == {"datacenter": {foreign: 1}} and data["tierStates"]["datacenter"] == "duplicated"
    assert metric(service, "audit_events_unexpected_total", topic="PageViewEvent", tier="datacenter") == 1
    assert service.reconcile_closed(NOW + 2) == []

    # A count of another tier changes the window: reconciled again, named the same without reading dc1 again.
    publish(service, "offline", "warehouse", held[:-1], recordId="run-1")
    publish(service, "offline", "warehouse", [foreign], quarantined="unknown schema id", recordId="run-1q")
    (again,) = service.reconcile_closed(NOW + 3)
    assert len(scans) == 2 and again.unexpected == {"datacenter": {foreign: 1}}
    assert [(q.tier, q.ids) for q in again.quarantined] == [("warehouse", {foreign: 1})] and again.identity.holds
    assert metric(service, "audit_events_unexpected_total", topic="PageViewEvent", tier="datacenter") == 1
    assert metric(service, "audit_events_duplicated_total", topic="PageViewEvent", tier="datacenter") == 2
