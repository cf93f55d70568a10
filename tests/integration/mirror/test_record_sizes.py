"""The mirror never stops for one record (issue 25, point 6), against real brokers: a record near its source
topic's limit is mirrored although the lineage headers make it larger (the target topic and the requests are
sized for it); a record the target refuses for good is quarantined with its lineage under state.dir, counted,
and the records after it are mirrored; the metrics server binds the host it is given."""

from __future__ import annotations

import os
import stat
import urllib.request
from pathlib import Path

from pipeline.lineage import lineage_of
from mirror.quarantine import read_quarantine
from pipeline.client.admin import AdminClient
from pipeline.client.producer import Producer, ProducerData
from tests.support.listening import listening_addresses
from tests.support.mirror import MirrorProcess, committed, create_topic, mirror_args, read_all
from tests.support.polling import wait_until
from tests.support.ports import free_port

LIMIT = 1_500_000


def _send(cluster, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    """Each record in its own request (sync), so that the source holds each as a batch of its own."""
    with Producer({"zookeeper.connect": cluster.zk_connect, "request.required.acks": -1,
                   "max.request.size": LIMIT + 10_000}) as producer:
        for key, value in records:
            producer.send(ProducerData(topic, key, [value], partition=0))


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def test_large_records_are_mirrored_and_refused_ones_quarantined_without_stopping(
        clusters, tmp_path: Path) -> None:  # noqa: F811
    source, target = clusters["dc1"], clusters["offline"]
    create_topic(source, "Big", 1, {"max.message.bytes": str(LIMIT)})
    create_topic(source, "Strict", 1)
    # The target keeps Strict compacted: a record without a key is invalid there (INVALID_RECORD), for good.
    create_topic(target, "Strict", 1, {"cleanup.policy": "compact"})
    near_limit = b"x" * (LIMIT - 200)
    _send(source, "Big", [(b"small", b"s"), (b"large", near_limit), (b"after", b"a")])
    _send(source, "Strict", [(b"k1", b"one"), (None, b"no key"), (b"k2", b"two"), (b"k3", b"three")])

    state = tmp_path / "state"
    port = free_port()
    mirror = MirrorProcess(tmp_path / "mirror.log", mirror_args(
        {"dc1": source}, target, "Big|Strict", "--state-dir", str(state), "--metrics-host", "127.0.0.1",
        "--metrics-port", str(port))).start()
    try:
        wait_until(lambda: mirror.alive() and committed(source, "mirror", "Big", 0) == 3
                   and committed(source, "mirror", "Strict", 0) == 4, 60, interval=0.1,
                   message=lambda: f"both topics committed to their ends; mirror log:\n{mirror.log_tail()}")
        assert listening_addresses(port) == {"127.0.0.1"}
        metrics = _metrics(port)
        assert ('mirror_records_quarantined_total{reason="invalid for the target",source="dc1",topic="Strict"} 1.0'
                in metrics), metrics
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()

    big = read_all(target, "Big", 1)[0]
    assert [(r.key, r.value) for r in big] == [(b"small", b"s"), (b"large", near_limit), (b"after", b"a")]
    with AdminClient(target.bootstrap) as admin:
        assert int(admin.describe_configs("Big")["max.message.bytes"]) > LIMIT
    strict = read_all(target, "Strict", 1)[0]
    assert [(r.key, r.value) for r in strict] == [(b"k1", b"one"), (b"k2", b"two"), (b"k3", b"three")]
    assert [lineage_of("Strict", r.headers).offset for r in strict] == [0, 2, 3]

    quarantine = state / "mirror" / "quarantine" / "dc1.jsonl"
    [entry] = list(read_quarantine(quarantine))
    assert (entry["source"], entry["topic"], entry["partition"], entry["offset"]) == ("dc1", "Strict", 0, 1)
    assert (entry["key"], entry["value"], entry["reason"]) == (None, b"no key", "invalid for the target")
    assert "INVALID_RECORD" in entry["error"] or "compacted" in entry["error"], entry["error"]
    assert stat.S_IMODE(os.stat(quarantine).st_mode) == 0o600
    for directory in (state, state / "mirror", quarantine.parent):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory
    assert "quarantined source dc1 Strict-0@1 (invalid for the target)" in mirror.log_text()
