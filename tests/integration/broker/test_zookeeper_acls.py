"""Brokers with zookeeper.set.acl=true: the cluster works as before (topics, leaders, replication), and a ZooKeeper
client without the brokers' digest can read their znodes but not rewrite them."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaProducer
from kazoo.exceptions import NoAuthError

from pipeline.zk import layout
from tests.support.clients import create_topic, kafka_python_consume


def test_a_secured_cluster_works_and_strangers_cannot_rewrite_it(zk_connect: str, broker_cluster_factory,
                                                                  tmp_path: Path) -> None:
    digest = tmp_path / "zookeeper.digest"
    digest.write_text("brokers:zk-secret")
    digest.chmod(0o600)
    cluster = broker_cluster_factory(zk_connect, size=2, overrides={
        "zookeeper.set.acl": "true", "zookeeper.digest.file": str(digest)})
    create_topic(cluster.bootstrap, "secured", partitions=2)
    cluster.wait_for_metadata("secured", 2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for index in range(10):
        producer.send("secured", f"v{index}".encode())
    producer.flush(30)
    producer.close()
    assert len(kafka_python_consume(cluster.bootstrap, "secured", [0, 1], 10)) == 10

    stranger = cluster.zk  # no digest
    for path in (layout.broker_path(1), layout.topic_path("secured"), layout.partition_state_path("secured", 0),
                 layout.CONTROLLER):
        assert stranger.get(path)[0]
        with pytest.raises(NoAuthError):
            stranger.set(path, b"{}")
    with pytest.raises(NoAuthError):
        stranger.create(layout.topic_path("intruder"), b'{"partitions": {"0": [1]}}')
    with pytest.raises(NoAuthError):
        stranger.delete(layout.broker_path(2))
