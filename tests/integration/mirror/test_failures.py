"""The mirror under failures (real ZooKeeper, real brokers): a mirror SIGKILLed and restarted, the target cluster
down for a while, a record the target refuses for good."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Callable

from tests.support.cluster import BrokerCluster
from tests.support.mirror import (
    MirrorProcess,
    committed,
    create_topic,
    end_offsets,
    lineages,
    mirror_args,
    mirror_error,
    produce,
    read_all,
    start_clusters,
    target_count,
    wait_for_count,
)
from tests.support.polling import wait_until

PARTITIONS = 4


def records(dc: str, n: int, start: int = 0) -> list[tuple[bytes, bytes, int, list]]:
    return [(b"k%d" % (i % 97), b"%s-%d" % (dc.encode(), i), 1_700_000_000_000 + i, [])
            for i in range(start, start + n)]


def check_complete(sources: dict[str, BrokerCluster], target: BrokerCluster, topic: str,
                   partitions: int = PARTITIONS) -> Counter:
    """Every source record is in the target (by lineage); the count of each lineage."""
    found = Counter((lineage.cluster, lineage.partition, lineage.offset)
                    for _, _, lineage in lineages(read_all(target, topic, partitions)))
    for name, cluster in sources.items():
        for partition, end in end_offsets(cluster, topic, partitions).items():
            missing = [o for o in range(end) if (name, partition, o) not in found]
            assert not missing, f"{name} {topic}-{partition}: {len(missing)} records lost, first {missing[:5]}"
    return found


def test_sigkill_and_restart_lose_nothing_and_duplicate_only_after_the_last_commit(
        clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, dc2, offline = clusters["dc1"], clusters["dc2"], clusters["offline"]
    for dc in (dc1, dc2):
        create_topic(dc, "events", PARTITIONS)
    total = produce(dc1, "events", records("dc1", 15000)) + produce(dc2, "events", records("dc2", 15000))
    sources = {"dc1": dc1, "dc2": dc2}
    # Small target batches keep the mirror busy long enough to be killed in the middle.
    args = mirror_args(sources, offline, "events", "--set", "producer.batch.size=20")
    first = MirrorProcess(tmp_path / "mirror1.log", args).start()
    try:
        wait_for_count(offline, "events", PARTITIONS, 3000, [first])
        first.kill()
    finally:
        first.kill()
    mirrored_before = target_count(offline, "events", PARTITIONS)
    assert mirrored_before < total, "the mirror finished before it was killed"
    commits = {(name, p): committed(cluster, "mirror", "events", p) or 0
               for name, cluster in sources.items() for p in range(PARTITIONS)}
    second = MirrorProcess(tmp_path / "mirror2.log", args).start()
    try:
        wait_until(lambda: all(committed(cluster, "mirror", "events", p) == end
                               for name, cluster in sources.items()
                               for p, end in end_offsets(cluster, "events", PARTITIONS).items()),
                   90, interval=0.2, message="every source partition committed to its end")
        assert second.stop() == 0, second.log_tail()
    finally:
        second.kill()
    found = check_complete(sources, offline, "events")
    duplicates = [key for key, n in found.items() if n > 1]
    assert all(offset >= commits[(name, p)] for name, p, offset in duplicates), \
        "a record committed before the kill was mirrored again"
    assert sum(found.values()) == total + len(duplicates)


def test_target_down_nothing_is_committed_and_the_mirror_resumes_by_itself_with_a_topic_created_meanwhile(
        clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    create_topic(dc1, "events", PARTITIONS)
    produce(dc1, "events", records("dc1", 2000))
    mirror = MirrorProcess(tmp_path / "mirror.log", mirror_args({"dc1": dc1}, offline, "events.*")).start()
    try:
        ends = end_offsets(dc1, "events", PARTITIONS)
        wait_until(lambda: all(committed(dc1, "mirror", "events", p) == e for p, e in ends.items()), 60,
                   message="the first records committed")
        target_broker = next(iter(offline.brokers.values()))
        target_broker.stop()
        produce(dc1, "events", records("dc1", 2000, 2000))
        create_topic(dc1, "events-late", 2)
        produce(dc1, "events-late", records("dc1", 500))
        # While the target is down (a few commit intervals of 200 ms), no source offset moves.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            assert mirror.running, mirror.log_tail()
            assert {p: committed(dc1, "mirror", "events", p) for p in ends} == ends
            time.sleep(0.1)
        # ... and the mirror says so (10 commit intervals without an acknowledgement), naming the target.
        assert "has acknowledged none of" in mirror.log_text(), mirror.log_tail()
        target_broker.start()
        new_ends = end_offsets(dc1, "events", PARTITIONS)
        late_ends = end_offsets(dc1, "events-late", 2)
        wait_until(lambda: mirror.alive()
                   and all(committed(dc1, "mirror", "events", p) == e for p, e in new_ends.items())
                   and all(committed(dc1, "mirror", "events-late", p) == e for p, e in late_ends.items()), 90,
                   interval=0.2, message=lambda: f"the mirror resuming: {mirror.log_tail(5)}")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()
    check_complete({"dc1": dc1}, offline, "events")
    check_complete({"dc1": dc1}, offline, "events-late", 2)


def test_a_record_the_target_refuses_for_good_without_a_quarantine_stops_the_mirror_without_committing_past_it(
        zookeeper_server: object, broker_cluster_factory: Callable[..., BrokerCluster], tmp_path: Path) -> None:
    # With state.dir such a record is quarantined and the mirror goes on (test_mirror_record_sizes.py); without
    # one it cannot be set aside, and is never skipped silently either.
    clusters = start_clusters(zookeeper_server, broker_cluster_factory)
    dc1, offline = clusters["dc1"], clusters["offline"]
    create_topic(dc1, "events", 1)
    create_topic(offline, "events", 1, {"cleanup.policy": "compact"})  # a record without a key is invalid there
    produce(dc1, "events", [(b"k", b"small-%d" % i, 1_700_000_000_000, []) for i in range(10)])
    produce(dc1, "events", [(None, b"x" * 5000, 1_700_000_000_000, [])])
    produce(dc1, "events", [(b"k", b"after-%d" % i, 1_700_000_000_000, []) for i in range(10)])
    _, error = mirror_error(tmp_path / "mirror.log", mirror_args({"dc1": dc1}, offline, "events"))
    assert "events-0@10" in error and "for good" in error and "state.dir" in error
    commit = committed(dc1, "mirror", "events", 0) or 0
    assert commit <= 10
    mirrored = {lineage.offset for _, _, lineage in lineages(read_all(offline, "events", 1))}
    assert set(range(commit)) <= mirrored and 10 not in mirrored
