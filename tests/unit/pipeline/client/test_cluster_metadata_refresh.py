"""Cluster metadata from a discovery that knows the layout (ZooKeeper): callers never wait behind a refresh."""

from __future__ import annotations

import threading
from typing import Iterable

import pytest

from pipeline.client.cluster import Cluster
from pipeline.client.errors import KafkaConnectionError, NoBrokersAvailable
from pipeline.protocol.errors import ErrorCode
from tests.support.polling import wait_until


class SlowSource:
    """A MetadataSource whose answers can be held up (ZooKeeper stopped) or refused (ZooKeeper gone)."""

    def __init__(self, leader: int) -> None:
        self.version = 0
        self.leader = leader
        self.open = threading.Event()
        self.open.set()
        self.failing = False
        self.calls = 0

    def bootstrap_brokers(self) -> list[tuple[str, int]]:
        raise KafkaConnectionError("no ZooKeeper")

    def metadata(self, topics: Iterable[str] | None = None) -> dict:
        self.calls += 1
        self.open.wait()
        if self.failing:
            raise KafkaConnectionError("ZooKeeper unavailable")
        partition = {"partition_index": 0, "leader_id": self.leader, "error_code": ErrorCode.NONE,
                     "replica_nodes": [self.leader], "isr_nodes": [self.leader]}
        return {"brokers": [{"node_id": self.leader, "host": "127.0.0.1", "port": 1}], "controller_id": -1,
                "cluster_id": "c", "topics": [{"name": name, "error_code": ErrorCode.NONE, "partitions": [partition]}
                                             for name in (topics or [])]}


def test_a_known_topic_is_answered_from_the_cache_while_a_stuck_refresh_runs_in_the_background() -> None:
    source = SlowSource(leader=1)
    cluster = Cluster(source)
    assert cluster.leader("t", 0) == 1
    source.open.clear()  # ZooKeeper stops answering
    source.version += 1  # ... after a change it announced
    answers: list[int] = []
    try:
        reader = threading.Thread(target=lambda: answers.extend(cluster.leader("t", 0) for _ in range(3)),
                                  daemon=True)
        reader.start()
        reader.join(5)
        assert answers == [1, 1, 1], "the cached leader is used while the refresh waits"
        wait_until(lambda: source.calls == 2, 5, message="one background refresh under way")
        source.leader = 2
    finally:
        source.open.set()
    wait_until(lambda: cluster.leader("t", 0) == 2, 5, message="the background refresh landing")
    assert source.calls == 2, "one refresh for many stale reads"
    cluster.close()


def test_a_failed_refresh_keeps_the_cache_and_backs_off() -> None:
    source = SlowSource(leader=1)
    cluster = Cluster(source)
    assert cluster.leader("t", 0) == 1
    source.failing = True
    source.version += 1
    for _ in range(100):
        assert cluster.leader("t", 0) == 1
    wait_until(lambda: cluster._refresher is None, 5, message="the background refresh giving up")
    assert source.calls <= 3, "a ZooKeeper outage does not turn every read into a refresh"
    with pytest.raises(NoBrokersAvailable):
        cluster.topic("unknown")  # nothing cached: the caller gets the (bounded) failure itself
    cluster.close()
