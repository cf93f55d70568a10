"""`python -m producers` against a real broker and registry: 30 s at a target rate, every event decodable with
its registered schema, keys and headers right, and the producer-tier audit counts equal to what was stored;
failed sends counted apart; SIGTERM flushes and publishes the open windows."""

from __future__ import annotations

import base64
import collections
import os
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from pipeline.auditing.sketch import EventSketch
from pipeline.client.admin import AdminClient
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS, subject_for
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder, schema_id_of
from tests.support import BrokerProcess
from tests.support.http_security import http_security_files
from tests.support.listening import listening_addresses
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.process import ChildProcess, python_env, python_module
from tests.support.registry import RegistryProcess

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "logs", log_path=tmp_path / "broker.log", overrides={"num.partitions": 3}) as process:
        yield process


class Emulator:
    """One `python -m producers` child process on the process harness; `stop()` sends SIGTERM and returns the exit
    status."""

    def __init__(self, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self.child = ChildProcess("emulator", python_module("producers", *args), log_path, env=python_env(),
                                  error=AssertionError).spawn()

    def wait(self, timeout: float) -> int:
        try:
            return self.child.wait(timeout)
        except subprocess.TimeoutExpired:
            self.child.kill()
            raise AssertionError(f"emulator still running after {timeout}s: {self.log()[-2000:]}") from None

    def stop(self, timeout: float = 60.0) -> int:
        return self.child.stop(timeout)

    def log(self) -> str:
        return self.child.log_text()

    def __enter__(self) -> "Emulator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.child.kill()


def read_topic(bootstrap: str, topic: str) -> list[ConsumerRecord]:
    """Every record of `topic` (all partitions of the one broker), up to the log end offsets of now."""
    with AdminClient(bootstrap) as admin:
        ends = admin.list_offsets(topic)
    host, port = bootstrap.rsplit(":", 1)
    records: list[ConsumerRecord] = []
    with SimpleConsumer(host, int(port)) as consumer:
        for partition, end in ends.items():
            offset = 0
            while offset < (end or 0):
                fetched = consumer.fetch(FetchRequest(topic, partition, offset, 4 << 20))
                batch = [r for r in fetched if r.offset >= offset]
                records.extend(ConsumerRecord(topic, partition, *r) for r in batch)
                offset = batch[-1].offset + 1
    return records


def emulator_args(broker: BrokerProcess, registry: RegistryProcess, *extra: str) -> list[str]:
    return ["--datacenter", "dc7", "--bootstrap-server", broker.bootstrap, "--registry", registry.url,
            "--servers", "4", "--seed", "11", "--members", "5000", *extra]


def audit_by_window(bootstrap: str, decoder: AvroDecoder) -> dict[tuple[str, str, int], dict]:
    """The AuditCount records, by (host, topic, window start); each key at most once."""
    found: dict[tuple[str, str, int], dict] = {}
    for record in read_topic(bootstrap, AUDIT_TOPIC):
        count = decoder.decode(record.value, AUDIT_TOPIC)
        key = (count["host"], count["topic"], int(count["windowStart"].timestamp() * 1000))
        assert key not in found, f"audit count published twice: {key}"
        assert record.key == count["topic"].encode()
        found[key] = count
    return found


def acknowledged(metrics_port: int) -> float:
    """Events the emulator's cluster acknowledged so far, all topics, from its Prometheus metrics (0 before)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("emulator_events_acknowledged_total{"))


def stored_by_window(bootstrap: str, decoder: AvroDecoder, window_ms: int) -> tuple[collections.Counter, list]:
    counts: collections.Counter = collections.Counter()
    events = []
    for topic in EVENT_TOPICS:
        for record in read_topic(bootstrap, topic):
            event = decoder.decode(record.value, topic)
            header = event["header"]
            time_ms = int(header["eventTime"].timestamp() * 1000)
            counts[(header["server"], topic, time_ms - time_ms % window_ms)] += 1
            events.append((topic, record, event))
    return counts, events


def test_twelve_seconds_at_the_target_rate_audited(tmp_path: Path, broker: BrokerProcess,
                                                   registry: RegistryProcess) -> None:
    rate, duration, window_ms = 400, 12, 2_000
    metrics_port = free_port()
    with Emulator(tmp_path / "emulator.log", *emulator_args(
            broker, registry, "--rate", str(rate), "--duration", str(duration), "--audit-window-ms", str(window_ms),
            "--metrics-port", str(metrics_port))) as emulator:
        def scraped() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
                    text = answer.read().decode()
            except OSError:
                return None
            return text if 'emulator_events_acknowledged_total{topic="PageViewEvent"}' in text else None

        metrics = wait_until(scraped, timeout=30, message="emulator metrics with acknowledged events")
        assert "emulator_send_latency_seconds_bucket" in metrics
        assert emulator.wait(duration + 60) == 0, emulator.log()[-3000:]

    registry_client = SchemaRegistryClient(registry.url)
    decoder = AvroDecoder(registry_client)
    stored, events = stored_by_window(broker.bootstrap, decoder, window_ms)
    total = len(events)
    # Rate control: within 10% of the target over the 12 s (system metrics events included).
    assert rate * duration * 0.9 <= total <= rate * duration * 1.1, (total, emulator.log()[-2000:])
    assert {topic for topic, _, _ in events} == set(EVENT_TOPICS)

    # Every event is in the wire format with the id its subject's schema got, and decodes with it.
    for topic in EVENT_TOPICS:
        latest = registry.call("GET", f"/subjects/{subject_for(topic)}/versions/latest")[1]
        assert {schema_id_of(r.value) for t, r, _ in events if t == topic} == {latest["id"]}
    ids = [event["header"]["eventId"] for _, _, event in events]
    assert len(set(ids)) == total
    servers = {event["header"]["server"] for _, _, event in events}
    assert len(servers) == 4
    sequences = collections.defaultdict(list)
    for topic, record, event in events:
        header = event["header"]
        assert (header["datacenter"], header["service"]) == ("dc7", "frontend")
        sequences[header["server"]].append(header["sequence"])
        if topic == "ProfileViewEvent":
            assert record.key == str(event["viewedMemberId"]).encode()
        elif topic == "SystemMetricsEvent":
            assert record.key == header["server"].encode()
        elif "memberId" in event and event["memberId"] != -1:
            assert record.key == str(event["memberId"]).encode()
        else:
            assert record.key, "a service call is keyed by the member (or guest session) it served"
    # Nothing failed, so every server's sequence is complete: 0, 1, 2, ... with no gap.
    for server, seen in sequences.items():
        assert sorted(seen) == list(range(len(seen))), server

    audit = audit_by_window(broker.bootstrap, decoder)
    assert {key: count["count"] for key, count in audit.items()} == dict(stored)
    assert all(count["properties"]["failed"] == "0" and count["tier"] == "producer" for count in audit.values())
    assert all(count["bytes"] > count["count"] * 20 for count in audit.values())
    # Windows of 2 s over 12 s: at least 6 windows per server, closed as the run went and at the end.
    assert len({key[2] for key in audit}) >= 6


def test_failed_sends_are_counted_apart(tmp_path: Path, broker: BrokerProcess, registry: RegistryProcess) -> None:
    """Every event created is accounted for (docs/accounting.md): the created log lists each id once, and each is
    either stored (in the acknowledged count) or named in its window's failedSketch; created = count + failed."""
    # SearchEvent batches exceed this topic's max.message.bytes: the broker refuses every one of them.
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics(["SearchEvent"], partitions=2, configs={"max.message.bytes": "64"})
    metrics_port = free_port()
    created_log = tmp_path / "state" / "created.log"
    with Emulator(tmp_path / "emulator.log", *emulator_args(
            broker, registry, "--rate", "300", "--duration", "6", "--audit-window-ms", "2000",
            "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port),
            "--created-log", str(created_log))) as emulator:
        wait_until(lambda: listening_addresses(metrics_port), timeout=30, message="the metrics server")
        assert listening_addresses(metrics_port) == {"127.0.0.1"}
        assert emulator.wait(90) == 0, emulator.log()[-3000:]
    decoder = AvroDecoder(SchemaRegistryClient(registry.url))
    stored, events = stored_by_window(broker.bootstrap, decoder, 2_000)
    assert not [e for topic, _, e in events if topic == "SearchEvent"]
    audit = audit_by_window(broker.bootstrap, decoder)
    searches = [count for (_, topic, _), count in audit.items() if topic == "SearchEvent"]
    assert searches and all(c["count"] == 0 and c["bytes"] == 0 for c in searches)
    assert sum(int(c["properties"]["failed"]) for c in searches) > 0
    others = {key: count["count"] for key, count in audit.items() if key[1] != "SearchEvent" and count["count"]}
    assert others == dict(stored)

    lines = [line.split(" ") for line in created_log.read_text().splitlines()]
    created = {event_id for event_id, _, _ in lines}
    assert len(created) == len(lines), "an id listed twice"
    assert stat.S_IMODE(created_log.stat().st_mode) == 0o600
    assert stat.S_IMODE(created_log.parent.stat().st_mode) == 0o700
    stored_ids = {str(event["header"]["eventId"]) for _, _, event in events}
    failed_ids: set[str] = set()
    for count in audit.values():
        properties = count["properties"]
        assert int(properties["created"]) == count["count"] + int(properties["failed"])
        if int(properties["failed"]):
            decoded = EventSketch.from_bytes(base64.b64decode(properties["failedSketch"])).decode()
            assert decoded.complete and set(decoded.missing) == set()
            failed_ids |= set(decoded.counts)
        else:
            assert "failedSketch" not in properties
    assert failed_ids and not failed_ids & stored_ids
    assert created == stored_ids | failed_ids
    assert sum(int(c["properties"]["created"]) for c in audit.values()) == len(created)
    assert {topic for event_id, topic, _ in lines if event_id in failed_ids} == {"SearchEvent"}
    summary = [line for line in emulator.log().splitlines() if "events in" in line and "acknowledged" in line]
    assert summary and f"created {len(created)} events" in summary[-1] and f"{len(failed_ids)} failed" in summary[-1]


def test_sigterm_flushes_and_publishes_the_open_windows(tmp_path: Path, broker: BrokerProcess,
                                                         registry: RegistryProcess) -> None:
    # One long window: nothing is published before the SIGTERM, everything must be after it.
    metrics_port = free_port()
    with Emulator(tmp_path / "emulator.log", *emulator_args(broker, registry, "--rate", "2000",
                                                           "--audit-window-ms", "3600000",
                                                           "--metrics-port", str(metrics_port))) as emulator:
        wait_until(lambda: acknowledged(metrics_port) >= 2000, timeout=60, message="2000 events acknowledged")
        assert emulator.stop() == 0, emulator.log()[-3000:]
    decoder = AvroDecoder(SchemaRegistryClient(registry.url))
    stored, events = stored_by_window(broker.bootstrap, decoder, 3_600_000)
    assert len(events) > 2000
    audit = audit_by_window(broker.bootstrap, decoder)
    assert {key: count["count"] for key, count in audit.items()} == dict(stored)
    assert all("unsettled" not in count["properties"] for count in audit.values())


def test_a_rate_out_of_reach_is_reported(tmp_path: Path, broker: BrokerProcess, registry: RegistryProcess) -> None:
    with Emulator(tmp_path / "emulator.log", *emulator_args(broker, registry, "--rate", "10000000",
                                                           "--duration", "3")) as emulator:
        assert emulator.wait(90) == 0, emulator.log()[-3000:]
    # The run's summary says so (another thread may log after it on a loaded machine, so not always last).
    summary = [line for line in emulator.log().splitlines() if "of the 10000000 asked for over the run" in line]
    assert len(summary) == 1 and "WARNING" in summary[0] and "cannot keep up" in summary[0], emulator.log()[-3000:]


def test_bad_settings_are_one_line_errors(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "producers", "--rate", "10"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "bootstrap.servers" in run.stderr
    dead = f"http://127.0.0.1:{free_port()}"
    run = subprocess.run([sys.executable, "-m", "producers", "--bootstrap-server", f"127.0.0.1:{free_port()}",
                          "--registry", dead, "--duration", "1"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert run.returncode == 1 and "cannot reach" in run.stderr.splitlines()[-1], run.stderr
    help_text = subprocess.run([sys.executable, "-m", "producers", "--help"], cwd=REPO_ROOT, capture_output=True,
                               text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert help_text.returncode == 0 and "--datacenter" in help_text.stdout


def test_the_emulator_registers_its_schemas_in_a_secured_registry(tmp_path: Path, broker: BrokerProcess) -> None:
    """With basic.auth.user.info and schema.registry.ssl.ca.location the emulator registers its schemas over
    HTTPS as the registry's writer; as a reader it is refused (403) and says so in one line."""
    secured = http_security_files(tmp_path / "security")
    with RegistryProcess(tmp_path / "registry.log", data_dir=tmp_path / "registry",
                         extra_args=tuple(secured.settings()), auth=secured.logins["reader"],
                         ca_file=secured.ca_file) as registry:
        def login(user: str) -> list[str]:
            return ["--set", f"basic.auth.user.info={':'.join(secured.logins[user])}",
                    "--set", f"schema.registry.ssl.ca.location={secured.ca_file}"]

        with Emulator(tmp_path / "reader.log", *emulator_args(broker, registry, "--duration", "1",
                                                              *login("reader"))) as refused:
            assert refused.wait(60) == 1
        assert "HTTP 403, error code 40301" in refused.log().splitlines()[-1], refused.log()[-2000:]
        with Emulator(tmp_path / "writer.log", *emulator_args(broker, registry, "--rate", "200", "--duration", "2",
                                                              *login("writer"))) as emulator:
            assert emulator.wait(90) == 0, emulator.log()[-3000:]
        status, subjects = registry.call("GET", "/subjects")
        assert status == 200 and {subject_for(topic) for topic in EVENT_TOPICS} <= set(subjects)
