"""The mirror's audit tier and metrics (real ZooKeeper, brokers and schema registry): AuditCount records of tier
`mirror` per source datacenter, topic and window of event time equal to what was mirrored; Prometheus metrics."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

from pipeline.auditing.sketch import EventSketch
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder, event_key
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.mirror import (
    MirrorProcess,
    committed,
    create_topic,
    end_offsets,
    mirror_args,
    mirror_error,
    produce,
    read_all,
)
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.registry import RegistryProcess

WINDOW_MS = 60_000
BASE_MS = 1_700_000_040_000 - 1_700_000_040_000 % WINDOW_MS


def metric(text: str, name: str) -> float:
    """The value of one sample line of the exposition (name with its labels, as printed)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} in the metrics")


def test_audit_counts_per_source_topic_and_window_and_the_metrics(clusters: dict[str, BrokerCluster],
                                                                  registry: RegistryProcess, tmp_path: Path) -> None:
    dc1, dc2, offline = clusters["dc1"], clusters["dc2"], clusters["offline"]
    expected: Counter = Counter()
    for name, dc, n in (("dc1", dc1, 900), ("dc2", dc2, 600)):
        create_topic(dc, "events", 2)
        stamps = [BASE_MS + (i % 3) * WINDOW_MS + i for i in range(n)]
        produce(dc, "events", [(b"k%d" % i, b"v" * 20, stamps[i], []) for i in range(n)])
        expected.update((name, "events", s - s % WINDOW_MS) for s in stamps)
    port = free_port()
    args = [a for a in mirror_args({"dc1": dc1, "dc2": dc2}, offline, "events") if a != "--no-audit"]
    mirror = MirrorProcess(tmp_path / "mirror.log", [*args, "--registry", registry.url, "--metrics-port", str(port),
                                                     "--set", f"audit.window.ms={WINDOW_MS}"]).start()
    try:
        for dc in (dc1, dc2):
            ends = end_offsets(dc, "events", 2)
            wait_until(lambda: all(committed(dc, "mirror", "events", p) == e for p, e in ends.items()), 60,
                       message=lambda: f"everything committed: {mirror.log_tail(5)}")
        url = f"http://127.0.0.1:{port}/metrics"
        # Lag is measured on the commit interval, after the commit.
        text = wait_until(lambda: (lambda t: t if 'mirror_lag_records{partition="1",source="dc2",topic="events"}'
                                   in t else "")(urllib.request.urlopen(url, timeout=10).read().decode()), 30,
                          message="lag metrics")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()
    assert metric(text, 'mirror_records_total{source="dc1",topic="events"}') == 900
    assert metric(text, 'mirror_records_total{source="dc2",topic="events"}') == 600
    assert metric(text, 'mirror_bytes_total{source="dc2",topic="events"}') == sum(
        len(b"k%d" % i) + 20 for i in range(600))
    assert metric(text, 'mirror_lag_records{partition="0",source="dc1",topic="events"}') == 0
    # One observation per acknowledged batch.
    batches = metric(text, "mirror_replication_latency_seconds_count")
    assert 1 <= batches <= 1500 and metric(text, "mirror_record_age_seconds_count") == batches
    assert metric(text, "mirror_record_age_seconds_bucket{le=\"+Inf\"}") == batches
    assert metric(text, 'mirror_offset_commits_total{source="dc1"}') >= 2
    client = SchemaRegistryClient(registry.url)
    try:
        decoder = AvroDecoder(client)
        counts = [decoder.decode(r.value, AUDIT_TOPIC) for rs in read_all(offline, AUDIT_TOPIC, 1).values() for r in rs]
    finally:
        client.close()
    assert all(c["tier"] == "mirror" and c["application"] == "mirror" for c in counts)
    found = Counter()
    for c in counts:
        found[(c["datacenter"], c["topic"], int(c["windowStart"].timestamp() * 1000))] += c["count"]
    assert found == expected
    assert all(c["properties"]["failed"] == "0" for c in counts)


def test_an_unreachable_schema_registry_is_a_one_line_start_up_error(clusters: dict[str, BrokerCluster],
                                                                     tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    args = [a for a in mirror_args({"dc1": dc1}, offline, "events") if a != "--no-audit"]
    _, error = mirror_error(tmp_path / "mirror.log", [*args, "--registry", f"http://127.0.0.1:{free_port()}"])
    assert "schema registry" in error and "127.0.0.1" in error


def audit_counts(cluster: BrokerCluster, registry: RegistryProcess, tier: str) -> tuple[Counter, EventSketch]:
    """(datacenter, topic, window start) -> count, over the AuditCount records of ``tier`` in ``cluster``, and the
    sum of their sketches."""
    client = SchemaRegistryClient(registry.url)
    try:
        decoder = AvroDecoder(client)
        counts = [decoder.decode(r.value, AUDIT_TOPIC) for rs in read_all(cluster, AUDIT_TOPIC, 1).values()
                  for r in rs]
    finally:
        client.close()
    found: Counter = Counter()
    sketch = EventSketch()
    for c in counts:
        if c["tier"] == tier:
            found[(c["datacenter"], c["topic"], int(c["windowStart"].timestamp() * 1000))] += c["count"]
            if c["count"]:
                sketch += EventSketch.from_bytes(c["sketch"])
    return found, sketch


def test_the_mirror_tier_counts_what_the_producer_tier_counted_window_by_window(
        clusters: dict[str, BrokerCluster], registry: RegistryProcess, tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    for topic in EVENT_TOPICS:
        create_topic(dc1, topic, 1)
    # Windows of 500 ms: thousands of events fall near a boundary.
    emulator = subprocess.run(
        [sys.executable, "-m", "producers", "--datacenter", "dc1", "--zookeeper", dc1.zk_connect, "--registry",
         registry.url, "--servers", "4", "--members", "5000", "--rate", "3000", "--duration", "4",
         "--audit-window-ms", "500"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert emulator.returncode == 0, emulator.stderr[-2000:]
    args = [a for a in mirror_args({"dc1": dc1}, offline, ",".join(EVENT_TOPICS)) if a != "--no-audit"]
    mirror = MirrorProcess(tmp_path / "mirror.log", [*args, "--registry", registry.url,
                                                     "--set", "audit.window.ms=500"]).start()
    try:
        for topic in EVENT_TOPICS:
            end = end_offsets(dc1, topic, 1)[0]
            wait_until(lambda: mirror.alive() and (committed(dc1, "mirror", topic, 0) or 0) == end, 60,
                       message=f"{topic} mirrored")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()
    produced, produced_ids = audit_counts(dc1, registry, "producer")
    mirrored, mirrored_ids = audit_counts(offline, registry, "mirror")
    assert sum(produced.values()) > 5000
    assert mirrored == produced
    # The sketches carry the ids: the producer tier's are exactly the events dc1 holds, the mirror tier's the same.
    stored = EventSketch()
    for topic in EVENT_TOPICS:
        stored.add([event_key(r.value).event_id for r in read_all(dc1, topic, 1)[0]])
    assert (produced_ids - stored).is_empty() and not stored.is_empty()
    assert (mirrored_ids - produced_ids).is_empty()
