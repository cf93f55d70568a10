"""Sources given by their brokers instead of ZooKeeper (`--source-bootstrap-server`, real brokers, real mirror
processes): every record once after a clean stop and restart, topic settings carried over through
DescribeConfigs, new topics and partitions picked up without a restart, offsets kept in a file that a
second process cannot take over."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pipeline.client.admin import AdminClient
from tests.support.cluster import BrokerCluster
from tests.support.mirror import (
    MirrorProcess,
    create_topic,
    end_offsets,
    lineages,
    mirror_error,
    produce,
    read_all,
    wait_for_count,
)
from tests.support.polling import wait_until


def records_of(dc: str, start: int, n: int) -> list[tuple[bytes, bytes, int, list]]:
    return [(b"key-%d" % (i % 30), b"%s-%d" % (dc.encode(), i), 1_700_000_000_000 + i, [("n", b"%d" % i)])
            for i in range(start, start + n)]


def broker_list_args(sources: dict[str, BrokerCluster], target: BrokerCluster, state: Path, *extra: str) -> list[str]:
    args = []
    for name, cluster in sorted(sources.items()):
        args += ["--source-bootstrap-server", f"{name}={cluster.bootstrap}"]
    return [*args, "--state-dir", str(state), "--target-bootstrap-server", target.bootstrap, "--whitelist", "ev.*",
            "--no-audit", "--set", "offset.commit.interval.ms=200",
            "--set", "consumer.topic.metadata.refresh.interval.ms=300", *extra]


def stored_offsets(state: Path, source: str) -> dict[str, dict[str, int]]:
    path = state / "mirror" / f"{source}.offsets.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_broker_list_sources_resume_from_their_offsets_file_and_follow_new_topics(
        clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, dc2, offline = clusters["dc1"], clusters["dc2"], clusters["offline"]
    state = tmp_path / "state"
    create_topic(dc1, "events", 2, {"retention.ms": "7200000"})
    create_topic(dc2, "events", 2)
    produce(dc1, "events", records_of("dc1", 0, 400))
    produce(dc2, "events", records_of("dc2", 0, 300))
    args = broker_list_args({"dc1": dc1, "dc2": dc2}, offline, state)

    mirror = MirrorProcess(tmp_path / "mirror.log", args).start()
    try:
        wait_for_count(offline, "events", 2, 700, [mirror])
        with AdminClient(offline.bootstrap) as admin:
            overrides = admin.describe_configs("events", overrides_only=True)
            # The source's settings, and room for the lineage headers on top of the source's record limit.
            assert overrides.pop("retention.ms") == "7200000"
            assert overrides.keys() == {"max.message.bytes"} and int(overrides["max.message.bytes"]) > 1048588
        # One process per offsets file: a second mirror of the same sources and group stops with the reason.
        _, error = mirror_error(tmp_path / "second.log", args)
        assert "in use by another process" in error and str(state) in error

        # Without a restart: a new whitelisted topic, and a partition added to a mirrored one.
        create_topic(dc2, "events-new", 1)
        produce(dc2, "events-new", records_of("dc2", 0, 50))
        with AdminClient(dc1.bootstrap) as admin:
            admin.create_partitions("events", 3)
        dc1.wait_for_metadata("events", 3)
        produce(dc1, "events", records_of("dc1", 400, 300))
        wait_for_count(offline, "events-new", 1, 50, [mirror])
        wait_for_count(offline, "events", 3, 1000, [mirror])
        ends = {name: end_offsets(cluster, "events", n) for name, cluster, n in (("dc1", dc1, 3), ("dc2", dc2, 2))}
        assert ends["dc1"][2] > 0, "the new partition got records"
        wait_until(lambda: all(stored_offsets(state, name).get("events") == {str(p): o for p, o in end.items()}
                               for name, end in ends.items()), 20, message="offsets stored up to the ends")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()

    # A restart reads on from the stored offsets: after a clean stop nothing is mirrored twice.
    produce(dc2, "events", records_of("dc2", 300, 200))
    mirror = MirrorProcess(tmp_path / "mirror-2.log", args).start()
    try:
        wait_for_count(offline, "events", 3, 1200, [mirror])
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()
    origins = Counter((lineage.cluster, lineage.partition, lineage.offset)
                      for _, _, lineage in lineages(read_all(offline, "events", 3)))
    assert sum(origins.values()) == 1200 and max(origins.values()) == 1
    sources = {"dc1": read_all(dc1, "events", 3), "dc2": read_all(dc2, "events", 2)}
    assert set(origins) == {(name, p, r.offset) for name, parts in sources.items()
                            for p, records in parts.items() for r in records}
