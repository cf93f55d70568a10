"""A source partition whose next offset to mirror was deleted by retention (real ZooKeeper, real brokers): the
mirror stops with an error naming the partition and the count, or with skip.lost.offsets skips exactly those.
A source topic deleted and created again (its offsets start over) stops the mirror too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from pipeline.client.admin import AdminClient
from pipeline.client.simple_consumer import SimpleConsumer
from pipeline.zk import layout
from tests.support.cluster import BrokerCluster
from tests.support.mirror import (
    MirrorProcess,
    committed,
    create_topic,
    end_offsets,
    lineages,
    mirror_args,
    mirror_error,
    mirror_until_committed,
    produce,
    read_all,
    start_clusters,
)
from tests.support.polling import wait_until

SMALL_LOG = {"segment.bytes": "2048", "retention.bytes": "8192"}


def earliest(cluster: BrokerCluster, topic: str) -> int:
    broker = next(iter(cluster.brokers.values()))
    with SimpleConsumer(broker.host, broker.port) as consumer:
        return consumer.get_offsets_before(topic, 0, -2, 1)[0]


def batch(start: int, n: int) -> list[tuple[bytes, bytes, int, list]]:
    return [(b"k", b"record-%06d" % i + b"." * 100, 1_700_000_000_000 + i, []) for i in range(start, start + n)]


def test_offsets_lost_to_retention_stop_the_mirror_or_are_skipped_and_counted_exactly(
        zookeeper_server: object, broker_cluster_factory: Callable[..., BrokerCluster], tmp_path: Path) -> None:
    clusters = start_clusters(zookeeper_server, broker_cluster_factory,
                              {"dc1": {"log.retention.check.interval.ms": 200}})
    dc1, offline = clusters["dc1"], clusters["offline"]
    create_topic(dc1, "events", 1, SMALL_LOG)
    produce(dc1, "events", batch(0, 20))
    args = mirror_args({"dc1": dc1}, offline, "events", "--set", "topic.config.exclude=segment.bytes,retention.bytes")
    mirror_until_committed(tmp_path / "mirror1.log", args, dc1, "events", {0: 20})
    # The target topic did not take the excluded settings: only its own record limit (the source's, plus the
    # lineage headers the mirror adds).
    assert set(layout.decode(offline.zk.get(layout.topic_config_path("events"))[0])["config"]) == {
        "max.message.bytes"}
    # While no mirror runs, the source writes on and its retention deletes offsets never mirrored.
    for start in range(20, 400, 20):
        produce(dc1, "events", batch(start, 20))
    seen: list[int] = []

    def settled() -> int:
        # Retention runs every 200 ms: the log start is settled once it stays put over several runs.
        seen.append(earliest(dc1, "events"))
        return seen[-1] if seen[-1] > 20 and seen[-4:] == [seen[-1]] * 4 else 0

    log_start = wait_until(settled, 30, interval=0.25, message="retention to delete the offsets after 20")
    lost = log_start - 20

    _, error = mirror_error(tmp_path / "mirror2.log", args)
    assert f"events-0 offsets 20..{log_start - 1} ({lost} records)" in error
    assert committed(dc1, "mirror", "events", 0) == 20

    skipping = MirrorProcess(tmp_path / "mirror3.log", [*args, "--skip-lost-offsets"]).start()
    try:
        end = end_offsets(dc1, "events", 1)[0]
        wait_until(lambda: committed(dc1, "mirror", "events", 0) == end, 60, message="the rest mirrored")
        assert skipping.stop() == 0, skipping.log_tail()
    finally:
        skipping.kill()
    report = [line for line in skipping.log_text().splitlines() if "were skipped" in line]
    assert len(report) == 1 and re.search(rf"\b{lost} offsets lost", report[0]), skipping.log_tail()
    assert f"dc1 events-0 20..{log_start - 1}" in report[0]
    mirrored = sorted(lineage.offset for _, _, lineage in lineages(read_all(offline, "events", 1)))
    assert mirrored == list(range(20)) + list(range(log_start, end))


def test_a_source_topic_deleted_and_created_again_stops_the_mirror_instead_of_skipping_its_records(
        zookeeper_server: object, broker_cluster_factory: Callable[..., BrokerCluster], tmp_path: Path) -> None:
    clusters = start_clusters(zookeeper_server, broker_cluster_factory)
    dc1, offline = clusters["dc1"], clusters["offline"]
    create_topic(dc1, "events", 1)
    produce(dc1, "events", batch(0, 50))
    args = mirror_args({"dc1": dc1}, offline, "events")
    mirror_until_committed(tmp_path / "mirror1.log", args, dc1, "events", {0: 50})
    with AdminClient(dc1.bootstrap) as admin:
        admin.delete_topics("events")
    wait_until(lambda: dc1.zk.exists(layout.topic_path("events")) is None, 30, message="events deleted")
    create_topic(dc1, "events", 1)
    produce(dc1, "events", batch(0, 10))
    _, error = mirror_error(tmp_path / "mirror2.log", args)
    assert "events-0 went back from offset 50 to 0" in error
    assert committed(dc1, "mirror", "events", 0) == 50
