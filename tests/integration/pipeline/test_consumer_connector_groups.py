"""ConsumerConnector against 3 cluster-mode brokers and a real ZooKeeper: ownership by Algorithm 1, groups."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict

from pipeline.client.admin import AdminClient
from pipeline.client.consumer_connector import ConsumerConnector
from pipeline.client.consumer_stream import ConsumerTimeout, KafkaStream
from pipeline.zk import layout
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import OwnershipObserver, connector, create_topic, produce
from tests.support.polling import wait_until


def owners_by_consumer(owners: dict[int, str], consumers: list[ConsumerConnector]) -> dict[str, list[int]]:
    result = {}
    for c in consumers:
        result[c.consumer_id] = sorted(p for p, stream in owners.items() if stream.startswith(c.consumer_id + "-"))
    return result


def drain(stream: KafkaStream, until: int, into: list) -> None:
    """Read from ``stream`` into ``into`` until it holds ``until`` records or the stream times out."""
    try:
        for record in stream:
            into.append(record)
            if len(into) >= until:
                return
    except ConsumerTimeout:
        return


def test_three_consumers_own_four_partitions_each_then_six_after_one_leaves(cluster: BrokerCluster,
                                                                            zk_connect: str) -> None:
    create_topic(cluster, "clicks", 12)
    observer = OwnershipObserver(zk_connect, "g1", "clicks")
    consumers: list[ConsumerConnector] = []
    overlaps: list[tuple] = []
    sampling = threading.Event()

    def sample() -> None:
        # Every consumer's own view of what it owns: never two at once for one partition.
        while not sampling.is_set():
            seen: dict[tuple, str] = {}
            for c in list(consumers):
                for tp in c.owned_partitions():
                    if tp in seen:
                        overlaps.append((tp, seen[tp], c.consumer_id))
                    seen[tp] = c.consumer_id
            sampling.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for _ in range(3):
            c = connector(zk_connect, "g1")
            c.create_message_streams({"clicks": 1})
            consumers.append(c)

        def split_is(sizes: list[int], members: list[ConsumerConnector]) -> bool:
            by = owners_by_consumer(observer.current(), members)
            return sorted(len(v) for v in by.values()) == sizes and sum(sizes) == len(observer.current())

        wait_until(lambda: split_is([4, 4, 4], consumers), 30,
                   message=lambda: f"4/4/4 split, have {observer.current()}")
        ranges = sorted(owners_by_consumer(observer.current(), consumers).values())
        assert ranges == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        assert sorted(ranges) == [sorted(owners_by_consumer(observer.current(), consumers)[c.consumer_id])
                                  for c in sorted(consumers, key=lambda c: c.consumer_id)]

        leaving = consumers.pop(1)
        leaving.shutdown()
        wait_until(lambda: split_is([6, 6], consumers), 30, message=lambda: f"6/6 split, have {observer.current()}")
        assert sorted(owners_by_consumer(observer.current(), consumers).values()) == [list(range(6)),
                                                                                      list(range(6, 12))]
        assert not cluster.zk.exists(layout.consumer_path("g1", leaving.consumer_id))

        sampling.set()
        sampler.join()
        for c in consumers:
            c.shutdown()
        # Shutdown deletes the owner nodes before it returns; the observer hears of it through watches, later.
        assert cluster.zk.get_children(layout.owners_path("g1", "clicks")) == []
        wait_until(lambda: observer.current() == {}, 10, message=lambda: f"observer still sees {observer.current()}")
    finally:
        sampling.set()
        sampler.join()
        for c in consumers:
            c.shutdown()
        observer.close()
    assert not overlaps, f"two consumers believed they owned one partition: {overlaps[:5]}"
    valid = {f"{c.consumer_id}-0" for c in consumers} | {f"{leaving.consumer_id}-0"}
    for snapshot in observer.history:
        assert set(snapshot.values()) <= valid
        assert set(snapshot) <= set(range(12))
    assert observer.history[-1] == {}, "shutdown releases every ownership"


def test_two_groups_each_receive_every_message_in_partition_order(cluster: BrokerCluster, zk_connect: str) -> None:
    create_topic(cluster, "views", 4)
    total = 2000
    produce(zk_connect, "views", ((f"k{i % 50}".encode(), f"m{i}".encode()) for i in range(total)))
    patient = {"consumer.timeout.ms": 10000}
    groups = {"ga": [connector(zk_connect, "ga", **patient) for _ in range(2)],
              "gb": [connector(zk_connect, "gb", **patient)]}
    try:
        received: dict[str, list] = defaultdict(list)
        for name, members in groups.items():
            streams = [m.create_message_streams({"views": 1})["views"][0] for m in members]
            per_stream: list[list] = [[] for _ in streams]
            threads = [threading.Thread(target=drain, args=(s, total, out)) for s, out in zip(streams, per_stream)]
            for t in threads:
                t.start()
            wait_until(lambda: sum(map(len, per_stream)) >= total, 60,
                       message=lambda: f"group {name} receiving {total} (has {sum(map(len, per_stream))})")
            for m in members:
                m.shutdown()
            for t in threads:
                t.join(15)
            received[name] = list(itertools.chain.from_iterable(per_stream))
        for name, records in received.items():
            values = sorted(r.value for r in records)
            assert values == sorted(f"m{i}".encode() for i in range(total)), f"group {name} missed or duplicated"
            by_partition = defaultdict(list)
            for r in records:
                by_partition[r.partition].append(r.offset)
            for offsets in by_partition.values():
                assert offsets == sorted(offsets) and offsets == list(range(offsets[0], offsets[0] + len(offsets)))
            assert all(r.topic == "views" and r.key.startswith(b"k") and r.timestamp > 0 for r in records)
        committed = {p: int(cluster.zk.get(layout.offset_path("ga", "views", p))[0]) for p in range(4)}
        assert sum(committed.values()) == total, "shutdown committed the next offset of every partition"
    finally:
        for members in groups.values():
            for m in members:
                m.shutdown()


def test_a_topic_that_gains_partitions_is_rebalanced_and_its_new_partitions_consumed(cluster: BrokerCluster,
                                                                                    zk_connect: str) -> None:
    create_topic(cluster, "widening", 1)
    observer = OwnershipObserver(zk_connect, "g-widen", "widening")
    consumer = connector(zk_connect, "g-widen")
    try:
        (stream,) = consumer.create_message_streams({"widening": 1})["widening"]
        wait_until(lambda: set(observer.current()) == {0}, 30, message="partition 0 owned")
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_partitions("widening", 3)
        wait_until(lambda: set(observer.current()) == {0, 1, 2}, 30,
                   message=lambda: f"the new partitions owned without a restart, have {observer.current()}")
        sent = produce(zk_connect, "widening", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(60)])
        received: list = []
        wait_until(lambda: drain(stream, sent, received) or len(received) >= sent, 30,
                   message=lambda: f"all {sent} records consumed, have {len(received)}")
        assert {r.partition for r in received} == {0, 1, 2}
        assert sorted(r.value for r in received) == sorted(f"v{i}".encode() for i in range(60))
    finally:
        consumer.shutdown()
        observer.close()
