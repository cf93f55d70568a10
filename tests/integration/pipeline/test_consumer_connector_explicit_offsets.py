"""ConsumerConnector with acknowledge_on_next=False and a rebalance listener: only what the application says
it finished is committed -- by commit_offsets(offsets), on a rebalance and at shutdown."""

from __future__ import annotations

import threading

from pipeline.client.consumer_connector import ConsumerConnector, ConsumerRebalanceListener
from pipeline.client.consumer_stream import ConsumerTimeout
from pipeline.client.rebalance import TopicPartition
from pipeline.zk import layout
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import connector, create_topic, produce
from tests.support.polling import wait_until


GROUP_SETTINGS = {"group.id": "mirror", "auto.offset.reset": "smallest", "zookeeper.session.timeout.ms": 4000,
                  "rebalance.backoff.ms": 200, "consumer.timeout.ms": 500, "auto.commit.interval.ms": 100}


class RecordingListener(ConsumerRebalanceListener):
    """Records the calls; on release commits what ``done`` says, as a mirror would."""

    def __init__(self) -> None:
        self.connector: ConsumerConnector | None = None
        self.started: list[dict[TopicPartition, int | None]] = []
        self.released: list[list[TopicPartition]] = []
        self.done: dict[TopicPartition, int] = {}
        self.lock = threading.Lock()

    def before_starting_fetchers(self, partitions: dict[TopicPartition, int | None]) -> None:
        with self.lock:
            self.started.append(dict(partitions))

    def before_releasing_partitions(self, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.released.append(list(partitions))
            offsets = {tp: self.done[tp] for tp in partitions if tp in self.done}
        assert self.connector is not None
        self.connector.commit_offsets(offsets)


def committed(cluster: BrokerCluster, group: str, topic: str, partition: int) -> int | None:
    stat = cluster.zk.exists(layout.offset_path(group, topic, partition))
    return None if stat is None else int(cluster.zk.get(layout.offset_path(group, topic, partition))[0])


def read(stream: object, n: int) -> list:
    records = []
    try:
        for record in stream:  # type: ignore[attr-defined]
            records.append(record)
            if len(records) == n:
                break
    except ConsumerTimeout:
        pass
    return records


def test_only_explicit_offsets_are_committed_by_commits_rebalances_and_shutdown(cluster: BrokerCluster,
                                                                                 zk_connect: str) -> None:
    create_topic(cluster, "logs", 2)
    produce(zk_connect, "logs", [(b"k%d" % i, b"v%d" % i) for i in range(40)])
    listener = RecordingListener()
    first = ConsumerConnector({**GROUP_SETTINGS, "zookeeper.connect": zk_connect},
                              acknowledge_on_next=False, rebalance_listener=listener)
    listener.connector = first
    second = None
    try:
        stream = first.create_message_streams({"logs": 1})["logs"][0]
        assert listener.started and set(listener.started[0]) == {("logs", 0), ("logs", 1)}
        assert all(offset is None for offset in listener.started[0].values())
        records = read(stream, 40)
        assert len(records) == 40
        by_partition = {p: [r.offset for r in records if r.partition == p] for p in (0, 1)}
        # Everything was handed out, and auto-commit ran, yet nothing is committed beyond the start.
        wait_until(lambda: committed(cluster, "mirror", "logs", 0) is not None, 10,
                   message="the auto-commit of the start offsets")
        assert committed(cluster, "mirror", "logs", 0) == 0 and committed(cluster, "mirror", "logs", 1) == 0
        written = first.commit_offsets({("logs", 0): 3, ("logs", 7): 9})
        assert written == {("logs", 0): 3}
        assert committed(cluster, "mirror", "logs", 0) == 3
        assert committed(cluster, "mirror", "logs", 1) == 0
        # A second member takes a partition: the listener commits what it finished before the release.
        listener.done = {("logs", 0): 5, ("logs", 1): min(by_partition[1]) + 2}
        second = connector(zk_connect, "mirror")
        second.create_message_streams({"logs": 1})
        wait_until(lambda: listener.released, 30, message="a release")
        assert sorted(listener.released[0]) == [("logs", 0), ("logs", 1)]
        wait_until(lambda: len(first.owned_partitions()) == 1, 30, message="the 1/1 split")
        assert committed(cluster, "mirror", "logs", 0) == 5
        assert committed(cluster, "mirror", "logs", 1) == min(by_partition[1]) + 2
        mine = next(iter(first.owned_partitions()))
        assert listener.started[-1] == {mine: committed(cluster, "mirror", *mine)}
        listener.done = {}
        first.shutdown()
        # Shutdown commits nothing the application did not finish.
        assert committed(cluster, "mirror", "logs", 0) == 5
        assert committed(cluster, "mirror", "logs", 1) == min(by_partition[1]) + 2
    finally:
        first.shutdown()
        if second is not None:
            second.shutdown()
