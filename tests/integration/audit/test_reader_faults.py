"""The audit never goes blind (real ZooKeeper, broker, schema registry and audit process): AuditCount records that
can never be counted -- not the wire format, an unknown schema id, a record of another schema, an AuditCount
without a field -- are skipped, counted per reason and logged with their partition and offset while the records
around them are counted; a record whose schema id is new while the registry is down is retried in place (nothing
after it is counted first) and counted once the registry is back; and a reader that stops for any other reason
fails the health check and stops the service with a non-zero exit."""

from __future__ import annotations

import copy
import io
import signal
import struct
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest

import audit.readers
from audit.__main__ import main as audit_main
from audit.config import AuditConfig
from audit.http_api import AuditHttpServer
from audit.service import AuditService
from pipeline.auditing.sketch import EventSketch
from schemas.events import AUDIT_TOPIC, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support.audit import WINDOW_MS, AuditProcess
from tests.support.cluster import BrokerCluster
from tests.support.mirror import create_topic, produce
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.registry import RegistryProcess


def producer_count(window_start: int, n: int) -> dict[str, Any]:
    sketch = EventSketch()
    sketch.add([str(uuid.uuid4()) for _ in range(n)])
    return {"topic": "PageViewEvent", "tier": "producer", "windowStart": window_start,
            "windowEnd": window_start + WINDOW_MS, "host": "fe-1", "datacenter": "dc1", "application": "frontend",
            "count": n, "bytes": 10 * n, "sketch": sketch.to_bytes(),
            "properties": {"recordId": uuid.uuid4().hex, "created": str(n), "failed": "0"}}


def wire(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return struct.pack(">bI", 0, schema_id) + body.getvalue()


def producer_counts(audit: AuditProcess) -> dict[int, int]:
    """Window start -> the producer tier's count, of the windows the audit reconciled."""
    return {w["windowStart"]: w["counts"].get("producer", 0) for w in audit.get("/api/windows")["windows"]}


def health(port: int) -> tuple[int, dict[str, Any]]:
    import json

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def dc1(zk_connect: str, broker_cluster_factory: Any) -> BrokerCluster:
    cluster = broker_cluster_factory(zk_connect, size=1, overrides={"num.partitions": 1})
    create_topic(cluster, AUDIT_TOPIC, 1)
    return cluster


def test_records_that_cannot_be_counted_are_skipped_and_a_registry_outage_is_waited_out_in_place(
        dc1: BrokerCluster, tmp_path: Path) -> None:
    registry = RegistryProcess(tmp_path / "registry" / "registry.log", data_dir=tmp_path / "registry" / "data").start()
    client = SchemaRegistryClient(registry.url)
    try:
        schema = load_schema("AuditCount")
        audit_id = client.register(f"{AUDIT_TOPIC}-value", schema)
        other = {"type": "record", "name": "Other", "namespace": "com.example", "fields": [
            {"name": "topic", "type": "string"}]}
        other_id = client.register("Other-value", other)
        without_count = copy.deepcopy(schema)
        without_count["fields"] = [f for f in without_count["fields"] if f["name"] != "count"]
        without_id = client.register("AuditCountWithoutCount-value", without_count)
        # A second AuditCount schema the audit meets only while the registry is down.
        newer = copy.deepcopy(schema)
        newer["fields"].append({"name": "note", "type": "string", "default": ""})
        newer_id = client.register("AuditCountNewer-value", newer)
        assert len({audit_id, other_id, without_id, newer_id}) == 4
        encoder = AvroEncoder(client, {AUDIT_TOPIC: schema})
        start = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS - 20 * WINDOW_MS
        good = [encoder.encode_for(AUDIT_TOPIC, [producer_count(start + i * WINDOW_MS, i + 1)])[0] for i in range(4)]
        poison = [b"a stray line", struct.pack(">bI", 0, 99_999) + b"\x02x",
                  wire(other_id, other, {"topic": "PageViewEvent"}),
                  wire(without_id, without_count, {k: v for k, v in producer_count(start, 1).items() if k != "count"})]
        produce(dc1, AUDIT_TOPIC, [(b"k", value, 0, []) for value in [good[0], *poison, good[1]]])

        audit = AuditProcess(tmp_path, ["--datacenter", f"dc1={dc1.zk_connect}", "--state-dir",
                                        str(tmp_path / "audit"), "--registry", registry.url, "--window-ms",
                                        str(WINDOW_MS), "--grace-ms", "500", "--set", "reconcile.interval.ms=300",
                                        "--set", "checkpoint.interval.ms=300"]).wait_ready()
        try:
            wait_until(lambda: producer_counts(audit) == {start: 1, start + WINDOW_MS: 2}, 60, interval=0.3,
                       message=lambda: f"the good counts around the poison: {producer_counts(audit)}")
            metrics = audit.get("/metrics")
            for reason in ("not in the Confluent wire format", "unknown schema id", "another schema", "missing field"):
                assert f'audit_records_skipped_total{{reader="dc1-audit",reason="{reason}"}} 1.0' in metrics, reason
            log = audit.log_path.read_text()
            for offset in (1, 2, 3, 4):
                assert f"skipped {AUDIT_TOPIC}-0@{offset}, it can never be counted" in log
            assert health(audit.port) == (200, {"healthy": True, "error": None, "readers": {
                "dc1-events": "reading", "dc1-audit": "reading"}})

            # The registry goes away; a count written with a schema id the audit has not met yet waits for it,
            # and so does the count after it.
            assert registry.stop() == 0
            newer_count = {**producer_count(start + 2 * WINDOW_MS, 3), "note": ""}
            produce(dc1, AUDIT_TOPIC, [(b"k", wire(newer_id, newer, newer_count), 0, []), (b"k", good[3], 0, [])])
            waiting = wait_until(lambda: (h := health(audit.port))[1]["readers"]["dc1-audit"].startswith(
                f"retrying: {AUDIT_TOPIC}-0@6") and h, 30, interval=0.2, message="the reader retrying the new id")
            assert waiting[0] == 200
            time.sleep(1.5)  # a few retries and reconciliations while the registry is away
            assert producer_counts(audit) == {start: 1, start + WINDOW_MS: 2}
            registry.start()
            wait_until(lambda: producer_counts(audit) == {start: 1, start + WINDOW_MS: 2, start + 2 * WINDOW_MS: 3,
                                                          start + 3 * WINDOW_MS: 4}, 60, interval=0.3,
                       message=lambda: f"both counted once the registry is back: {producer_counts(audit)}")
            assert health(audit.port)[1]["readers"]["dc1-audit"] == "reading"
            skipped = [line for line in audit.get("/metrics").splitlines()
                       if line.startswith("audit_records_skipped_total")]
            assert len(skipped) == 4 and all(line.endswith(" 1.0") for line in skipped)  # none for the outage
            assert audit.stop() == 0, audit.log_path.read_text()[-3000:]
        finally:
            audit.kill()
    finally:
        client.close()
        if registry.process is not None and registry.process.poll() is None:
            registry.stop()


def test_a_reader_that_stops_on_an_unexpected_error_fails_the_health_check_and_stops_the_service(
        dc1: BrokerCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    registry = RegistryProcess(tmp_path / "registry" / "registry.log", data_dir=tmp_path / "registry" / "data").start()
    client = SchemaRegistryClient(registry.url)
    try:
        encoder = AvroEncoder(client, {AUDIT_TOPIC: load_schema("AuditCount")})
        start = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS - 5 * WINDOW_MS
        produce(dc1, AUDIT_TOPIC, [(b"k", encoder.encode_for(AUDIT_TOPIC, [producer_count(start, 2)])[0], 0, [])])

        def broken(self: Any, record: Any) -> None:
            raise RuntimeError("a bug in the audit")
        monkeypatch.setattr(audit.readers.AuditCountReader, "__call__", broken)
        config = AuditConfig({"datacenters": f"dc1={dc1.zk_connect}", "state.dir": str(tmp_path / "audit"),
                              "schema.registry.url": registry.url, "window.ms": WINDOW_MS, "grace.ms": 500,
                              "reconcile.interval.ms": 300, "checkpoint.interval.ms": 300})
        service = AuditService(config)
        server = AuditHttpServer(service, "127.0.0.1", free_port()).start()
        outcome: list[BaseException | None] = []
        stop = threading.Event()

        def run() -> None:
            try:
                service.run(stop)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 -- the test looks at it
                outcome.append(exc)
        thread = threading.Thread(target=run)
        thread.start()
        try:
            failing = wait_until(lambda: (h := health(server.port))[0] == 503 and h, 30, interval=0.1,
                                 message="the health check failing")
            assert failing[1]["error"] == "audit reader dc1-audit stopped: a bug in the audit"
            assert failing[1]["readers"]["dc1-audit"] == "stopped: a bug in the audit"
            with pytest.raises(urllib.error.HTTPError) as scraped:
                urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
            assert scraped.value.code == 503
            thread.join(60)
            assert not thread.is_alive()
            (error,) = outcome
            assert isinstance(error, OSError) and str(error) == "audit reader dc1-audit stopped: a bug in the audit"
        finally:
            stop.set()
            thread.join(60)
            server.stop()
        # `python -m audit run` says so in one line and exits 1 (supervisord restarts it).
        handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = audit_main(["run", "--datacenter", f"dc1={dc1.zk_connect}", "--state-dir", str(tmp_path / "audit"),
                               "--registry", registry.url, "--window-ms", str(WINDOW_MS), "--http-port", "0",
                               "--http-host", "127.0.0.1"])
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
        assert code == 1
        assert "python -m audit: error: audit reader dc1-audit stopped: a bug in the audit" in capsys.readouterr().err
    finally:
        client.close()
        assert registry.stop() == 0
