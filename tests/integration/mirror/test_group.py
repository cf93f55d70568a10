"""Mirror processes in one group (real ZooKeeper, real brokers): they share the source partitions, the survivor
takes over a killed one's, a new whitelisted topic is mirrored without a restart, and a source topic that gains
partitions mid-run grows the target topic and has its new partitions mirrored into the same target partitions."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from kazoo.exceptions import NoNodeError

from pipeline.client.admin import AdminClient
from pipeline.zk import layout
from tests.support.cluster import BrokerCluster
from tests.support.mirror import (
    MirrorProcess,
    committed,
    create_topic,
    end_offsets,
    lineages,
    mirror_args,
    produce,
    read_all,
)
from tests.support.polling import wait_until

PARTITIONS = 4


def owners(cluster: BrokerCluster, topic: str) -> dict[int, str]:
    """Partition -> the consumer id (without its stream number) that owns it in the mirror group."""
    result = {}
    for partition in range(PARTITIONS):
        try:
            stream = cluster.zk.get(layout.owner_path("mirror", topic, partition))[0].decode()
        except NoNodeError:
            continue
        result[partition] = stream.rsplit("-", 1)[0]
    return result


def records(tag: bytes, start: int, n: int) -> list[tuple[bytes, bytes, int, list]]:
    return [(b"k%d" % i, tag + b"-%d" % i, 1_700_000_000_000 + i, []) for i in range(start, start + n)]


def all_committed(cluster: BrokerCluster, topic: str, partitions: int) -> bool:
    return all(committed(cluster, "mirror", topic, p) == end
               for p, end in end_offsets(cluster, topic, partitions).items())


def test_two_mirrors_share_the_partitions_and_the_survivor_takes_over(clusters: dict[str, BrokerCluster],
                                                                      tmp_path: Path) -> None:
    dc1, dc2, offline = clusters["dc1"], clusters["dc2"], clusters["offline"]
    for dc in (dc1, dc2):
        create_topic(dc, "events", PARTITIONS)
    args = mirror_args({"dc1": dc1, "dc2": dc2}, offline, "events.*")
    mirrors = [MirrorProcess(tmp_path / f"mirror{i}.log", args).start() for i in range(2)]
    try:
        for dc in (dc1, dc2):
            wait_until(lambda: len(owners(dc, "events")) == PARTITIONS and len(set(owners(dc, "events").values())) == 2,
                       60, message=lambda: f"two mirrors owning two partitions each: {owners(dc, 'events')}")
            assert sorted(list(owners(dc, "events").values()).count(o) for o in set(owners(dc, "events").values())) \
                == [2, 2]
        produce(dc1, "events", records(b"dc1", 0, 2000))
        produce(dc2, "events", records(b"dc2", 0, 2000))
        wait_until(lambda: all_committed(dc1, "events", PARTITIONS) and all_committed(dc2, "events", PARTITIONS),
                   60, message="the first records mirrored by both")
        # A new whitelisted topic is picked up by the running mirrors.
        create_topic(dc1, "events-new", 2)
        produce(dc1, "events-new", records(b"new", 0, 300))
        wait_until(lambda: all_committed(dc1, "events-new", 2), 60, message="events-new mirrored")
        mirrors[0].kill()
        produce(dc1, "events", records(b"dc1", 2000, 2000))
        produce(dc2, "events", records(b"dc2", 2000, 2000))
        for dc in (dc1, dc2):
            wait_until(lambda: len(set(owners(dc, "events").values())) == 1 and len(owners(dc, "events")) == PARTITIONS,
                       60, message=lambda: f"the survivor owning every partition: {owners(dc, 'events')}")
        wait_until(lambda: all_committed(dc1, "events", PARTITIONS) and all_committed(dc2, "events", PARTITIONS),
                   60, message=lambda: f"the rest mirrored by the survivor: {mirrors[1].log_tail(5)}")
        assert mirrors[1].stop() == 0, mirrors[1].log_tail()
    finally:
        for mirror in mirrors:
            mirror.kill()
    expected = (("events", PARTITIONS, {"dc1": dc1, "dc2": dc2}), ("events-new", 2, {"dc1": dc1}))
    for topic, partitions, sources in expected:
        found = {(l.cluster, l.partition, l.offset) for _, _, l in lineages(read_all(offline, topic, partitions))}
        for name, cluster in sources.items():
            for partition, end in end_offsets(cluster, topic, partitions).items():
                assert all((name, partition, o) in found for o in range(end)), \
                    f"{name} {topic}-{partition} lost records"


def test_a_source_that_gains_partitions_grows_the_target(clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, dc2, offline = clusters["dc1"], clusters["dc2"], clusters["offline"]
    for dc in (dc1, dc2):
        create_topic(dc, "growing", 2)
    mirror = MirrorProcess(tmp_path / "mirror.log", mirror_args({"dc1": dc1, "dc2": dc2}, offline, "growing")).start()
    try:
        produce(dc1, "growing", records(b"dc1", 0, 400))
        produce(dc2, "growing", records(b"dc2", 0, 400))
        wait_until(lambda: mirror.alive() and all_committed(dc1, "growing", 2) and all_committed(dc2, "growing", 2),
                   60, message="the first records mirrored")
        with AdminClient(offline.bootstrap) as admin:
            assert len(admin.describe_topics(["growing"])[0].partitions) == 2

        with AdminClient(dc1.bootstrap) as admin:
            admin.create_partitions("growing", 4)
        dc1.wait_for_metadata("growing", 4)
        # Keys hash over four partitions now: records land in the new partitions 2 and 3 too.
        produce(dc1, "growing", records(b"dc1", 400, 800))
        produce(dc2, "growing", records(b"dc2", 400, 200))
        wait_until(lambda: mirror.alive() and all_committed(dc1, "growing", 4) and all_committed(dc2, "growing", 2),
                   60, message=lambda: f"the new partitions mirrored without a restart:\n{mirror.log_tail(10)}")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()

    sources = {"dc1": read_all(dc1, "growing", 4), "dc2": read_all(dc2, "growing", 2)}
    assert all(sources["dc1"][p] for p in (2, 3)), "the new source partitions got records"
    with AdminClient(offline.bootstrap) as admin:
        assert len(admin.describe_topics(["growing"])[0].partitions) == 4
    target = read_all(offline, "growing", 4)
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    for partition, offset, lineage in lineages(target):
        source = sources[lineage.cluster][lineage.partition][lineage.offset]
        record = target[partition][offset]
        assert partition == lineage.partition
        assert (record.key, record.value, record.timestamp) == (source.key, source.value, source.timestamp)
        seen[(lineage.cluster, lineage.partition)].append(lineage.offset)
    # Every source record arrived, once (no restart: no duplicates), in order per source partition.
    for name, partitions in sources.items():
        for partition, items in partitions.items():
            assert seen[(name, partition)] == list(range(len(items))), f"{name} partition {partition}"
