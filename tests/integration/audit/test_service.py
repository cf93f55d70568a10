"""The audit service on a running pipeline (real ZooKeeper, brokers, schema registry, emulator and mirror
processes): every window complete at every tier without a fault; events a producer counted that its cluster
does not hold are named, exactly, at the datacenter tier; results survive a restart."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import uuid
from pathlib import Path

from audit.window_scan import scan_window
from pipeline.client.cluster import Cluster, StaticBrokerList
from schemas.events import EVENT_TOPICS
from tests.support.audit import (
    WINDOW_MS,
    AuditProcess,
    all_reconciled,
    audit_args,
    listening_addresses,
    publish_phantom_count,
    run_pipeline,
    wait_committed,
)
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.mirror import MirrorProcess, mirror_args
from tests.support.polling import wait_until
from tests.support.registry import RegistryProcess

TIERS = ("producer", "datacenter", "mirror", "offline")


def test_audit_of_a_running_pipeline(clusters: dict[str, BrokerCluster], registry: RegistryProcess,
                                     tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    stored = run_pipeline(dc1, offline, registry, tmp_path)
    assert stored >= 3000
    args = audit_args(dc1, offline, registry, tmp_path / "audit")
    audit = AuditProcess(tmp_path, args).wait_ready()
    try:
        assert listening_addresses(audit.port) == ["127.0.0.1"]  # --http-host, not every interface
        windows = wait_until(lambda: all_reconciled(audit, stored, TIERS), 90, interval=0.3,
                             message=f"{stored} events reconciled at four tiers")
        for w in windows:
            assert w["completeness"] == dict.fromkeys(TIERS, 1.0), w
            assert w["namedEvents"] == 0, w

        # A loss between a producer and its cluster: three events counted as acknowledged, never stored.
        victim = max((w for w in windows if w["topic"] == "PageViewEvent"), key=lambda w: w["windowStart"])
        lost = sorted(str(uuid.uuid4()) for _ in range(3))
        publish_phantom_count(dc1, registry, "PageViewEvent", victim["windowStart"], lost)
        path = f"/api/windows/PageViewEvent/dc1/{victim['windowStart']}"
        window = wait_until(lambda: (w := audit.get(path))["discrepancies"] and w, 60, interval=0.3,
                            message="the phantom events named")
        (discrepancy,) = window["discrepancies"]
        assert (discrepancy["earlier"], discrepancy["later"]) == ("producer", "datacenter")
        assert discrepancy["missing"] == dict.fromkeys(lost, 1) and discrepancy["duplicated"] == {}
        assert window["completeness"]["datacenter"] < 1.0
        # Lost at the datacenter tier, the first without them (the tiers after it only follow).
        assert window["lost"] == {"datacenter": dict.fromkeys(lost, 1)} and window["identity"]["holds"]
        assert window["state"] == "incomplete" and window["tierStates"]["offline"] == "short"
        metrics = audit.get("/metrics")
        assert 'audit_events_lost_total{tier="datacenter",topic="PageViewEvent"} 3.0' in metrics
        # Latency from event time to every tier, per topic: one observation per event the tier counted (the
        # phantom count carries no latency).
        views = sum(w["counts"]["datacenter"] for w in windows if w["topic"] == "PageViewEvent")
        for tier in TIERS:
            assert f'audit_tier_latency_seconds_count{{tier="{tier}",topic="PageViewEvent"}} {float(views)}' in metrics
        # Consumer-group lag from the offsets in ZooKeeper: the mirror group committed everything.
        for partition in (0, 1):
            assert (f'kafka_consumergroup_lag{{cluster="dc1",group="mirror",partition="{partition}",'
                    f'topic="PageViewEvent"}} 0.0') in metrics
        assert audit.stop() == 0, audit.log_path.read_text()[-3000:]
    finally:
        audit.kill()

    # The results outlive the process: the report reads them back, and a restart serves them again.
    report = subprocess.run([sys.executable, "-m", "audit", "report", "--state-dir", str(tmp_path / "audit"),
                             "--topic", "PageViewEvent"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert report.returncode == 0 and "lost 3 at datacenter" in report.stdout, report.stdout + report.stderr
    # A named event is looked for at every tier: nowhere (it was lost before dc1); a stored one is in both.
    where = ["--datacenter", f"dc1={dc1.zk_connect}", "--offline", offline.zk_connect]
    missing = subprocess.run([sys.executable, "-m", "audit", "trace", lost[0], *where, "--state-dir",
                              str(tmp_path / "audit")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "is in none of dc1, offline" in missing.stderr, missing.stderr
    held = scan_dc1(dc1, "PageViewEvent", victim["windowStart"])[0]
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(held.event_time / 1000))
    traced = subprocess.run([sys.executable, "-m", "audit", "trace", held.event_id, *where, "--around", when,
                             "--topic", "PageViewEvent", "--window-ms", "2000"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=60)
    assert traced.returncode == 0, traced.stderr
    lines = traced.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"dc1: PageViewEvent-{held.partition}@{held.offset} ")
    assert lines[1].startswith("offline: PageViewEvent-") and "datacenter dc1" in lines[1]
    again = AuditProcess(tmp_path, args).wait_ready()
    try:
        assert wait_until(lambda: served(again, path), 30, interval=0.3, message="history served")
        assert again.stop() == 0
    finally:
        again.kill()


def served(audit: AuditProcess, path: str) -> bool:
    try:
        return bool(audit.get(path)["discrepancies"])
    except urllib.error.HTTPError:
        return False


def test_a_mirror_that_copies_everything_again_has_its_duplicates_named_by_reading_the_clusters(
        clusters: dict[str, BrokerCluster], registry: RegistryProcess, tmp_path: Path) -> None:
    """A second mirror group copies every event again (as a mirror whose offsets were lost would): far more
    duplicates per window than the sketch can name, so the audit reads the windows back from dc1 and the offline
    cluster and names every duplicated event at the mirror tier."""
    dc1, offline = clusters["dc1"], clusters["offline"]
    stored = run_pipeline(dc1, offline, registry, tmp_path, rate=1500, duration=2)
    mirror_again(dc1, offline, registry, tmp_path)
    audit = AuditProcess(tmp_path, audit_args(dc1, offline, registry, tmp_path / "audit")).wait_ready()
    try:
        def doubled() -> list[dict]:
            windows = audit.get("/api/windows")["windows"]
            counted = {t: sum(w["counts"].get(t, 0) for w in windows) for t in TIERS}
            expected = {"producer": stored, "datacenter": stored, "mirror": 2 * stored, "offline": 2 * stored}
            return windows if counted == expected and all(w["namedEvents"] for w in windows) else []
        windows = wait_until(doubled, 90, interval=0.3, message=lambda: "the second copy counted and named: " + str(
            [(w["topic"], w["counts"], w["state"], w["pending"], w["namedEvents"], w["undecoded"])
             for w in audit.get("/api/windows")["windows"] if not w["namedEvents"]][:6]) + f" stored {stored}")
        held = {w["windowStart"]: w for w in windows if w["topic"] == "PageViewEvent"}
        biggest = max(held.values(), key=lambda w: w["counts"]["datacenter"])
        assert biggest["counts"]["datacenter"] > 120, "far more duplicates than the sketch decodes"
        window = audit.get(f"/api/windows/PageViewEvent/dc1/{biggest['windowStart']}")
        in_dc1 = {f.event_id for f in scan_dc1(dc1, "PageViewEvent", biggest["windowStart"])}
        # Named at the data tier where the extra copies appear; the mirror's own count is read the same way.
        assert window["lost"] == {} and window["duplicated"] == {"offline": dict.fromkeys(sorted(in_dc1), 1)}
        steps = {(d["earlier"], d["later"]): d for d in window["discrepancies"]}
        assert sorted(steps) == [("datacenter", "mirror"), ("datacenter", "offline")]
        assert all(d["read"] and d["decoded"] and d["missing"] == {} for d in steps.values())
        assert window["identity"]["holds"] and window["identity"]["duplicates"] == len(in_dc1)
        assert audit.stop() == 0
    finally:
        audit.kill()


def mirror_again(dc1: BrokerCluster, offline: BrokerCluster, registry: RegistryProcess, tmp_path: Path) -> None:
    args = [a for a in mirror_args({"dc1": dc1}, offline, ",".join(EVENT_TOPICS)) if a != "--no-audit"]
    mirror = MirrorProcess(tmp_path / "mirror-again.log", [*args, "--group", "mirror-again", "--registry",
                                                           registry.url, "--set", f"audit.window.ms={WINDOW_MS}"])
    mirror.start()
    try:
        wait_committed(dc1, mirror, "mirror-again")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()


def scan_dc1(dc1: BrokerCluster, topic: str, start: int) -> list:
    cluster = Cluster(StaticBrokerList(dc1.bootstrap))
    try:
        return scan_window(cluster, topic, start, start + WINDOW_MS)
    finally:
        cluster.close()
