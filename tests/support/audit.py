"""Audit tests: the `python -m audit run` process, a pipeline with emulators and a mirror, a loss to inject."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pipeline.auditing.sketch import EventSketch
from pipeline.client.producer import Producer, ProducerData
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.mirror import MirrorProcess, committed, create_topic, end_offsets, mirror_args
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.process import ChildProcess, python_module
from tests.support.registry import RegistryProcess

WINDOW_MS = 1000


class AuditProcess:
    """`python -m audit run` with its HTTP API on a free port, on the process harness; secured, ``ca_file`` (the
    CA of its https keystore, given in ``args``) and ``login`` are what :meth:`get` uses."""

    def __init__(self, tmp_path: Path, args: list[str], *, login: tuple[str, str] | None = None,
                 ca_file: Path | None = None) -> None:
        self.port = free_port()
        self.login = login
        self.context = None if ca_file is None else ssl.create_default_context(cafile=str(ca_file))
        self.log_path = tmp_path / f"audit-{self.port}.log"
        self.child = ChildProcess("audit", python_module("audit", "run", *args, "--http-host", "127.0.0.1",
                                                         "--http-port", str(self.port)),
                                  self.log_path, error=AssertionError).spawn()

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.child.process

    def _answers(self) -> bool:
        try:
            return bool(self.get("/metrics"))
        except urllib.error.URLError:
            return False

    def wait_ready(self) -> "AuditProcess":
        self.child.wait_ready(self._answers, 30, interval=0.1)
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.context else 'http'}://127.0.0.1:{self.port}"

    def get(self, path: str) -> Any:
        assert self.child.running, self.log_path.read_text()[-3000:]
        headers = {}
        if self.login:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(self.login).encode()).decode()
        with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers), timeout=5,
                                    context=self.context) as answer:
            body = answer.read()
        return json.loads(body) if path.startswith("/api") else body.decode()

    def stop(self) -> int:
        return self.child.stop(60)

    def kill(self) -> None:
        self.child.kill()


def listening_addresses(port: int) -> list[str]:
    """The IPv4 addresses something listens on at TCP ``port`` (from /proc/net/tcp)."""
    found = []
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:
                found.append(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return found


def publish_phantom_count(cluster: BrokerCluster, registry: RegistryProcess, topic: str, window_start: int,
                          ids: list[str]) -> None:
    """A producer-tier AuditCount for events the cluster never got: what a loss between a producer and its
    cluster looks like to the audit (acknowledged, then gone)."""
    sketch = EventSketch()
    sketch.add(ids)
    publish_audit_count(cluster, registry, audit_count(topic, "producer", window_start, len(ids), sketch))


def audit_count(topic: str, tier: str, window_start: int, count: int, sketch: EventSketch | None = None,
                **properties: str) -> dict[str, Any]:
    """An AuditCount record of ``tier`` (of datacenter dc1) as a tier publishes it."""
    return {"topic": topic, "tier": tier, "windowStart": window_start, "windowEnd": window_start + WINDOW_MS,
            "host": f"{tier}-test", "datacenter": "dc1", "application": tier, "count": count, "bytes": 100 * count,
            "sketch": None if sketch is None else sketch.to_bytes(), "properties": properties}


def publish_audit_count(cluster: BrokerCluster, registry: RegistryProcess, record: dict[str, Any]) -> None:
    """``record`` published to ``cluster``'s audit topic (acks=all)."""
    client = SchemaRegistryClient(registry.url)
    try:
        encoder = AvroEncoder(client, {AUDIT_TOPIC: load_schema("AuditCount")})
        with Producer({"zookeeper.connect": cluster.zk_connect, "request.required.acks": -1,
                       "serializer.class": encoder}) as producer:
            producer.send(ProducerData(AUDIT_TOPIC, record["topic"].encode(), [record]))
    finally:
        client.close()


def emulate(dc1: BrokerCluster, registry: RegistryProcess, rate: int = 1500, duration: int = 3) -> None:
    """Emulators into dc1 for ``duration`` seconds (its event topics created first, 2 partitions each)."""
    for topic in EVENT_TOPICS:
        create_topic(dc1, topic, 2)
    emulator = subprocess.run(
        [sys.executable, "-m", "producers", "--datacenter", "dc1", "--zookeeper", dc1.zk_connect, "--registry",
         registry.url, "--servers", "3", "--members", "2000", "--rate", str(rate), "--duration", str(duration),
         "--audit-window-ms", str(WINDOW_MS)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert emulator.returncode == 0, emulator.stderr[-2000:]


def mirror_all(dc1: BrokerCluster, offline: BrokerCluster, registry: RegistryProcess, tmp_path: Path,
               settings: dict[str, str] | None = None) -> int:
    """A mirror of dc1 into offline (with ``settings`` besides) until everything is committed; the number of events
    dc1 holds."""
    args = [a for a in mirror_args({"dc1": dc1}, offline, ",".join(EVENT_TOPICS)) if a != "--no-audit"]
    extra = [a for name, value in (settings or {}).items() for a in ("--set", f"{name}={value}")]
    mirror = MirrorProcess(tmp_path / "mirror.log", [*args, "--registry", registry.url,
                                                     "--set", f"audit.window.ms={WINDOW_MS}", *extra]).start()
    try:
        wait_committed(dc1, mirror)
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()
    return sum(sum(end_offsets(dc1, topic, 2).values()) for topic in EVENT_TOPICS)


def wait_committed(dc1: BrokerCluster, mirror: MirrorProcess, group: str = "mirror") -> None:
    """Wait until ``mirror`` (alive meanwhile) committed every event topic of dc1 to its end, in ``group``."""
    for topic in EVENT_TOPICS:
        ends = end_offsets(dc1, topic, 2)
        wait_until(lambda: mirror.alive() and all((committed(dc1, group, topic, p) or 0) == end
                                                  for p, end in ends.items()), 60, message=f"{topic} mirrored")


def run_pipeline(dc1: BrokerCluster, offline: BrokerCluster, registry: RegistryProcess, tmp_path: Path,
                 rate: int = 1500, duration: int = 3) -> int:
    """Emulators into dc1, then a mirror into offline until everything is committed; the events dc1 holds."""
    emulate(dc1, registry, rate, duration)
    return mirror_all(dc1, offline, registry, tmp_path)


def audit_args(dc1: BrokerCluster, offline: BrokerCluster, registry: RegistryProcess, state: Path,
               *extra: str) -> list[str]:
    return ["--datacenter", f"dc1={dc1.zk_connect}", "--offline", offline.zk_connect, "--state-dir", str(state),
            "--registry", registry.url, "--window-ms", str(WINDOW_MS), "--grace-ms", "500",
            "--set", "reconcile.interval.ms=300", "--set", "checkpoint.interval.ms=300", *extra]


def all_reconciled(audit: "AuditProcess", stored: int, tiers: tuple[str, ...]) -> list[dict]:
    """The windows once every tier of ``tiers`` counted ``stored`` events over them ([] before)."""
    windows = audit.get("/api/windows")["windows"]
    counted = {tier: sum(w["counts"].get(tier, 0) for w in windows) for tier in tiers}
    return windows if set(counted.values()) == {stored} else []
