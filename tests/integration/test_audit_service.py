"""The audit service on a running pipeline (real ZooKeeper, brokers, schema registry, emulator and mirror
processes): every window complete at every tier without a fault; events a producer counted that its cluster
does not hold are named, exactly, at the datacenter tier; results survive a restart."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from audit.sketch import EventSketch
from pipeline.client.producer import Producer, ProducerData
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.mirror import MirrorProcess, clusters, committed, create_topic, end_offsets, mirror_args
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.registry import RegistryProcess, standalone_registry

__all__ = ["clusters"]  # the fixture, imported for pytest

WINDOW_MS = 1000


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryProcess]:
    yield from standalone_registry(tmp_path / "registry")


class AuditProcess:
    """`python -m audit run` with its HTTP API on a free port."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        self.port = free_port()
        self.log_path = tmp_path / f"audit-{self.port}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "audit", "run", *args, "--http-port", str(self.port)], cwd=REPO_ROOT,
                stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> "AuditProcess":
        def answers() -> bool:
            try:
                return bool(self.get("/metrics"))
            except urllib.error.URLError:
                return False
        wait_until(answers, 30, interval=0.1, message="the audit's HTTP API answers")
        return self

    def get(self, path: str) -> Any:
        assert self.process.poll() is None, self.log_path.read_text()[-3000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as answer:
            body = answer.read()
        return json.loads(body) if path.startswith("/api") else body.decode()

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(60)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def publish_phantom_count(cluster: BrokerCluster, registry: RegistryProcess, topic: str, window_start: int,
                          ids: list[str]) -> None:
    """A producer-tier AuditCount for events the cluster never got: what a loss between a producer and its
    cluster looks like to the audit (acknowledged, then gone)."""
    sketch = EventSketch()
    sketch.add(ids)
    record = {"topic": topic, "tier": "producer", "windowStart": window_start, "windowEnd": window_start + WINDOW_MS,
              "host": "fe-phantom", "datacenter": "dc1", "application": "frontend", "count": len(ids),
              "bytes": 100 * len(ids), "sketch": sketch.to_bytes(), "properties": {}}
    client = SchemaRegistryClient(registry.url)
    try:
        encoder = AvroEncoder(client, {AUDIT_TOPIC: load_schema("AuditCount")})
        with Producer({"zookeeper.connect": cluster.zk_connect, "request.required.acks": -1,
                       "serializer.class": encoder}) as producer:
            producer.send(ProducerData(AUDIT_TOPIC, topic.encode(), [record]))
    finally:
        client.close()


def test_audit_of_a_running_pipeline(clusters: dict[str, BrokerCluster], registry: RegistryProcess,
                                     tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    for topic in EVENT_TOPICS:
        create_topic(dc1, topic, 2)
    emulator = subprocess.run(
        [sys.executable, "-m", "producers", "--datacenter", "dc1", "--zookeeper", dc1.zk_connect, "--registry",
         registry.url, "--servers", "3", "--members", "2000", "--rate", "1500", "--duration", "3",
         "--audit-window-ms", str(WINDOW_MS)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert emulator.returncode == 0, emulator.stderr[-2000:]
    args = [a for a in mirror_args({"dc1": dc1}, offline, ",".join(EVENT_TOPICS)) if a != "--no-audit"]
    mirror = MirrorProcess(tmp_path / "mirror.log", [*args, "--registry", registry.url,
                                                     "--set", f"audit.window.ms={WINDOW_MS}"]).start()
    try:
        for topic in EVENT_TOPICS:
            ends = end_offsets(dc1, topic, 2)
            wait_until(lambda: mirror.alive() and all((committed(dc1, "mirror", topic, p) or 0) == end
                                                      for p, end in ends.items()), 60, message=f"{topic} mirrored")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()

    audit_args = ["--datacenter", f"dc1={dc1.zk_connect}", "--offline", offline.zk_connect, "--state-dir",
                  str(tmp_path / "audit"), "--registry", registry.url, "--window-ms", str(WINDOW_MS),
                  "--grace-ms", "500", "--set", "reconcile.interval.ms=300", "--set", "checkpoint.interval.ms=300"]
    stored = sum(sum(end_offsets(dc1, topic, 2).values()) for topic in EVENT_TOPICS)
    assert stored >= 3000
    audit = AuditProcess(tmp_path, audit_args).wait_ready()
    try:
        def reconciled() -> list[dict]:
            windows = audit.get("/api/windows")["windows"]
            counted = {tier: sum(w["counts"].get(tier, 0) for w in windows)
                       for tier in ("producer", "datacenter", "mirror", "offline")}
            return windows if set(counted.values()) == {stored} else []
        windows = wait_until(reconciled, 90, interval=0.3, message=f"{stored} events reconciled at four tiers")
        for w in windows:
            assert w["completeness"] == dict.fromkeys(["producer", "datacenter", "mirror", "offline"], 1.0), w
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
        metrics = audit.get("/metrics")
        assert 'audit_events_lost_total{tier="datacenter",topic="PageViewEvent"} 3.0' in metrics
        assert audit.stop() == 0, audit.log_path.read_text()[-3000:]
    finally:
        audit.kill()

    # The results outlive the process: the report reads them back, and a restart serves them again.
    report = subprocess.run([sys.executable, "-m", "audit", "report", "--state-dir", str(tmp_path / "audit"),
                             "--topic", "PageViewEvent"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert report.returncode == 0 and "3 missing" in report.stdout, report.stdout + report.stderr
    again = AuditProcess(tmp_path, audit_args).wait_ready()
    try:
        assert wait_until(lambda: audit_window(again, path), 30, interval=0.3, message="history served")
        assert again.stop() == 0
    finally:
        again.kill()


def audit_window(audit: AuditProcess, path: str) -> bool:
    try:
        return bool(audit.get(path)["discrepancies"])
    except urllib.error.HTTPError:
        return False
