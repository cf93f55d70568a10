"""Two datacenter clusters mirrored into the offline cluster by `python -m mirror` (real ZooKeeper, real brokers):
every record at least once, in order per source partition, key/value/headers/timestamp kept, lineage exact."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from pipeline.zk import layout
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.mirror import (
    MirrorProcess,
    committed,
    create_topic,
    end_offsets,
    lineages,
    mirror_args,
    own_headers,
    produce,
    read_all,
    wait_for_count,
)
from tests.support.polling import wait_until

PARTITIONS = 4


def records_of(dc: str, n: int) -> list[tuple[bytes, bytes, int, list]]:
    return [(b"member-%d" % (i % 50), b"%s-event-%d" % (dc.encode(), i), 1_700_000_000_000 + i,
             [("trace", b"%s-%d" % (dc.encode(), i))]) for i in range(n)]


def test_two_sources_every_record_once_in_order_with_exact_lineage(clusters: dict[str, BrokerCluster],
                                                                   tmp_path: Path) -> None:
    dc1, dc2, offline = clusters["dc1"], clusters["dc2"], clusters["offline"]
    create_topic(dc1, "events", PARTITIONS, {"retention.ms": "123456789"})
    create_topic(dc2, "events", PARTITIONS)
    create_topic(dc1, "other", 1)
    sent = {"dc1": produce(dc1, "events", records_of("dc1", 3000)),
            "dc2": produce(dc2, "events", records_of("dc2", 2000))}
    produce(dc1, "other", [(b"k", b"v", 1, [])])
    sources = {"dc1": read_all(dc1, "events", PARTITIONS), "dc2": read_all(dc2, "events", PARTITIONS)}
    mirror = MirrorProcess(tmp_path / "mirror.log", mirror_args({"dc1": dc1, "dc2": dc2}, offline, "ev.*")).start()
    try:
        wait_for_count(offline, "events", PARTITIONS, sum(sent.values()), [mirror])
        # Committed offsets reach the end of every source partition (all acknowledged).
        for name, cluster in (("dc1", dc1), ("dc2", dc2)):
            ends = end_offsets(cluster, "events", PARTITIONS)
            for partition, end in ends.items():
                wait_until(lambda: committed(cluster, "mirror", "events", partition) == end, 20,
                           message=f"{name} events-{partition} committed up to {end}")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()
    # SIGTERM left the groups: no member, no owner left behind in either source.
    for cluster in (dc1, dc2):
        assert cluster.zk.get_children(layout.consumer_ids_path("mirror")) == []
        assert cluster.zk.get_children(layout.owners_path("mirror", "events")) == []
    target = read_all(offline, "events", PARTITIONS)
    found = lineages(target)
    assert len(found) == sum(sent.values())
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    for partition, offset, lineage in found:
        source = sources[lineage.cluster][lineage.partition][lineage.offset]
        record = target[partition][offset]
        # Same partition number, so same key -> same target partition; everything of the record kept.
        assert partition == lineage.partition and lineage.topic == "events"
        assert (record.key, record.value, record.timestamp) == (source.key, source.value, source.timestamp)
        assert own_headers(record) == list(source.headers)
        seen[(lineage.cluster, lineage.partition)].append(lineage.offset)
    for (name, partition), offsets in seen.items():
        assert offsets == list(range(len(sources[name][partition]))), f"{name} partition {partition} out of order"
    keys_by_partition = defaultdict(set)
    for partition, records in target.items():
        for record in records:
            keys_by_partition[record.key].add(partition)
    assert all(len(partitions) == 1 for partitions in keys_by_partition.values())
    # The target topic was created like the source: partitions and settings; "other" was not mirrored.
    config = layout.decode(offline.zk.get(layout.topic_config_path("events"))[0])["config"]
    assert config.get("retention.ms") == "123456789"
    assert offline.zk.exists(layout.topic_path("other")) is None
    # The command line names the origin of any target record.
    partition, offset, lineage = found[len(found) // 2]
    answer = subprocess.run([sys.executable, "-m", "mirror", "lineage", "events", str(partition), str(offset),
                             "--target", offline.zk_connect], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=60)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == (f"source={lineage.cluster} topic=events partition={lineage.partition} "
                                     f"offset={lineage.offset}")
