"""Injected losses at three tiers of a running pipeline (real ZooKeeper, brokers, registry, emulators, mirror,
Spark ETL and audit processes): events a producer counted that its cluster never got, events the mirror drops
(its testing.drop.event.ids setting) and events the ETL drops (its own). The audit names exactly those events,
each at the tier where it was lost, and nothing else."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from schemas.events import EVENT_TOPICS
from schemas.serde import event_key
from tests.support.audit import (
    WINDOW_MS,
    AuditProcess,
    audit_args,
    emulate,
    mirror_all,
    publish_phantom_count,
    wait_committed,
)
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.etl import run_etl
from tests.support.mirror import (
    MirrorProcess,
    create_topic,
    end_offsets,
    mirror_args,
    read_all,
    target_count,
)
from tests.support.polling import wait_until
from tests.support.registry import RegistryProcess

pytestmark = pytest.mark.slow

TIERS = ("producer", "datacenter", "mirror", "offline", "warehouse")


def test_losses_at_three_tiers_are_named_exactly_where_they_happened(
        clusters: dict[str, BrokerCluster], registry: RegistryProcess, tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    emulate(dc1, registry, rate=800, duration=2)
    held = [event_key(r.value) for records in read_all(dc1, "PageViewEvent", 2).values() for r in records]
    assert len(held) > 40
    dropped_by_mirror = {held[3].event_id, held[17].event_id}
    dropped_by_etl = {held[11].event_id, held[29].event_id}
    stored = mirror_all(dc1, offline, registry, tmp_path,
                        settings={"testing.drop.event.ids": ",".join(dropped_by_mirror)})

    code, output = run_etl(tmp_path / "etl.log", [
        "load", "--zookeeper", offline.zk_connect, "--warehouse", str(tmp_path / "warehouse"), "--master", "local[2]",
        "--registry", registry.url, "--set", f"audit.window.ms={WINDOW_MS}",
        "--set", f"testing.drop.event.ids={','.join(dropped_by_etl)}"], timeout=300)
    assert code == 0, output[-3000:]
    never_stored = {str(uuid.uuid4()), str(uuid.uuid4())}
    window = held[5].event_time - held[5].event_time % WINDOW_MS
    publish_phantom_count(dc1, registry, "PageViewEvent", window, sorted(never_stored))

    audit = AuditProcess(tmp_path, audit_args(dc1, offline, registry, tmp_path / "audit")).wait_ready()
    try:
        expected = {"producer": stored + 2, "datacenter": stored, "mirror": stored - 2, "offline": stored - 2,
                    "warehouse": stored - 4}

        def reconciled() -> list[dict]:
            windows = audit.get("/api/windows")["windows"]
            counted = {t: sum(w["counts"].get(t, 0) for w in windows) for t in TIERS}
            return windows if counted == expected and sum(w["namedEvents"] for w in windows) == 6 else []
        windows = wait_until(reconciled, 120, interval=0.5, message=lambda: "every tier counted, six events named: "
                             + str({t: sum(w["counts"].get(t, 0) for w in audit.get("/api/windows")["windows"])
                                    for t in TIERS}) + f" expected {expected}")
        named: dict[str, set[str]] = {}
        for summary in windows:
            if not summary["namedEvents"]:
                assert set(summary["completeness"].values()) == {1.0}, summary
                continue
            found = audit.get(f"/api/windows/{summary['topic']}/{summary['datacenter']}/{summary['windowStart']}")
            assert all(d["decoded"] and d["duplicated"] == {} for d in found["discrepancies"]), found
            assert found["duplicated"] == {} and found["identity"]["holds"], found
            for tier, ids in found["lost"].items():
                assert set(ids.values()) == {1}, found
                named.setdefault(tier, set()).update(ids)
        # Each at the first tier without it (the offline cluster and the warehouse miss the mirror's too).
        assert named == {"datacenter": never_stored, "mirror": dropped_by_mirror, "warehouse": dropped_by_etl}
        assert audit.stop() == 0
    finally:
        audit.kill()

    # trace: an event that made it is at every tier; one the ETL dropped stops at the offline cluster.
    where = ["--datacenter", f"dc1={dc1.zk_connect}", "--offline", offline.zk_connect,
             "--warehouse", str(tmp_path / "warehouse"), "--topic", "PageViewEvent", "--window-ms", "2000"]
    for event, places in ((held[0], ["dc1", "offline", "warehouse"]), (held[11], ["dc1", "offline"])):
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(event.event_time / 1000))
        traced = subprocess.run([sys.executable, "-m", "audit", "trace", event.event_id, *where, "--around", when],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert traced.returncode == 0, traced.stderr
        lines = traced.stdout.splitlines()
        assert [line.split(":")[0] for line in lines] == places, lines
        if "warehouse" in places:
            assert lines[2].startswith("warehouse: PageViewEvent/date=") and " row " in lines[2]


def test_a_mirror_killed_and_restarted_has_its_duplicates_named_as_duplicates_of_the_right_events(
        clusters: dict[str, BrokerCluster], registry: RegistryProcess, tmp_path: Path) -> None:
    """SIGKILL of a mirror between two commits while events keep coming: its successor sends again what was
    acknowledged after the last commit. The audit names exactly the events the offline cluster holds twice, as
    duplicates, and no event as lost."""
    dc1, offline = clusters["dc1"], clusters["offline"]
    for topic in EVENT_TOPICS:
        create_topic(dc1, topic, 2)
    emulator = subprocess.Popen(
        [sys.executable, "-m", "producers", "--datacenter", "dc1", "--zookeeper", dc1.zk_connect, "--registry",
         registry.url, "--servers", "2", "--members", "500", "--rate", "40", "--duration", "10",
         "--audit-window-ms", str(WINDOW_MS)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    args = [a for a in mirror_args({"dc1": dc1}, offline, ",".join(EVENT_TOPICS)) if a != "--no-audit"]
    args += ["--registry", registry.url, "--set", f"audit.window.ms={WINDOW_MS}"]
    first = MirrorProcess(tmp_path / "mirror-1.log", [*args, "--set", "offset.commit.interval.ms=3000"]).start()
    try:
        wait_until(lambda: first.alive() and target_count(offline, "ServiceCallEvent", 2) > 100, 30, interval=0.1,
                   message="the first mirror under way")
        first.kill()
    finally:
        first.kill()
    second = MirrorProcess(tmp_path / "mirror-2.log", args).start()
    try:
        assert emulator.wait(60) == 0, emulator.stderr.read().decode()[-2000:]
        wait_committed(dc1, second)
        assert second.stop() == 0, second.log_tail()
    finally:
        second.kill()
        if emulator.poll() is None:
            emulator.kill()
            emulator.wait()
    stored = sum(sum(end_offsets(dc1, topic, 2).values()) for topic in EVENT_TOPICS)
    copies: Counter = Counter()
    for topic in EVENT_TOPICS:
        copies.update(event_key(r.value).event_id for records in read_all(offline, topic, 2).values()
                      for r in records)
    twice = {event for event, n in copies.items() if n == 2}
    assert twice and max(copies.values()) == 2 and sum(copies.values()) == stored + len(twice)

    audit = AuditProcess(tmp_path, audit_args(dc1, offline, registry, tmp_path / "audit")).wait_ready()
    try:
        def named() -> dict[str, dict[str, int]]:
            windows = audit.get("/api/windows")["windows"]
            counts = {t: sum(w["counts"].get(t, 0) for w in windows) for t in ("datacenter", "offline")}
            if counts != {"datacenter": stored, "offline": stored + len(twice)}:
                return {}
            found: dict[str, dict[str, int]] = {"lost": {}, "duplicated": {}}
            for w in windows:
                if w["namedEvents"] or w["undecoded"]:
                    window = audit.get(f"/api/windows/{w['topic']}/dc1/{w['windowStart']}")
                    assert all(d["decoded"] for d in window["discrepancies"]), window
                    for ids in window["lost"].values():
                        found["lost"].update(ids)
                    for tier, ids in window["duplicated"].items():
                        assert tier == "offline", window  # where the extra copy appears
                        found["duplicated"].update(ids)
            return found if len(found["duplicated"]) >= len(twice) else {}
        found = wait_until(named, 90, interval=0.5, message="the duplicates named")
        assert found == {"lost": {}, "duplicated": dict.fromkeys(sorted(twice), 1)}
        assert audit.stop() == 0
    finally:
        audit.kill()
