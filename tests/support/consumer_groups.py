"""Helpers for consumer-group tests: a broker cluster on ZooKeeper, producing, and an ownership observer."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pipeline.client.admin import AdminClient
from pipeline.client.consumer_connector import ConsumerConnector
from pipeline.client.producer import Producer, ProducerData
from pipeline.zk import layout
from pipeline.zk.client import connect
from tests.support.cluster import BrokerCluster

# Brokers leave ZooKeeper quickly when killed, so failure tests stay short.
BROKER_OVERRIDES = {"zookeeper.session.timeout.ms": 4000, "num.partitions": 1}


def start_cluster(base_dir: Path, zk_connect: str, size: int = 3) -> BrokerCluster:
    cluster = BrokerCluster(base_dir, zk_connect, size, BROKER_OVERRIDES)
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()
        raise


def create_topic(cluster: BrokerCluster, topic: str, partitions: int) -> None:
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics(topic, partitions=partitions)
    cluster.wait_for_metadata(topic, partitions)


def produce(zk_connect: str, topic: str, messages: Iterable[tuple[bytes | None, bytes]], **config: object) -> int:
    """Send (key, value) pairs through a ZooKeeper-discovering producer with acks=1; return the count."""
    settings = {"zookeeper.connect": zk_connect, "request.required.acks": 1, "producer.type": "async",
                "queue.time": 5, "batch.size": 500, **config}
    count = 0
    with Producer(settings) as producer:
        for key, value in messages:
            producer.send(ProducerData(topic, key, [value]))
            count += 1
        producer.flush()
    return count


def connector(zk_connect: str, group: str, **config: object) -> ConsumerConnector:
    settings = {"zookeeper.connect": zk_connect, "group.id": group, "auto.offset.reset": "smallest",
                "zookeeper.session.timeout.ms": 4000, "rebalance.backoff.ms": 200,
                "consumer.timeout.ms": 500, "auto.commit.interval.ms": 500, **config}
    return ConsumerConnector(settings)


class OwnershipObserver:
    """Watches /consumers/<group>/owners/<topic> and records every state it sees: partition -> stream id."""

    def __init__(self, zk_connect: str, group: str, topic: str) -> None:
        self.zk: KazooClient = connect(zk_connect)
        self.path = layout.owners_path(group, topic)
        self.history: list[dict[int, str]] = []
        self._lock = threading.Lock()
        self.zk.ensure_path(self.path)
        self.zk.ChildrenWatch(self.path, self._on_children)

    def _on_children(self, children: list[str]) -> None:
        snapshot = {}
        for child in children:
            try:
                data = self.zk.get(f"{self.path}/{child}", watch=self._on_data)[0]
            except NoNodeError:
                continue
            snapshot[int(child)] = data.decode()
        with self._lock:
            self.history.append(snapshot)

    def _on_data(self, event: object) -> None:
        try:
            self._on_children(self.zk.get_children(self.path))
        except NoNodeError:
            return

    def current(self) -> dict[int, str]:
        with self._lock:
            return dict(self.history[-1]) if self.history else {}

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()
