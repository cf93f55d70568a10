"""A topic deleted while one of its brokers was down: its logs go when the broker returns, and if the name
was used again meanwhile, the old data must not come back.

A broker deletes, once its view of ZooKeeper is complete at start-up, the logs of topics ZooKeeper no
longer has. Each incarnation of a topic name gets a new topic id (in /brokers/topics/<topic>); a partition
directory records the id it belongs to (partition.metadata), and a broker deletes a log of an earlier
incarnation before it leads the new partition.
"""

from __future__ import annotations

from pipeline.client.admin import AdminClient
from pipeline.zk import layout
from tests.integration.broker.test_cluster import fetch_values, produce_values
from tests.support import wait_until
from tests.support.cluster import BrokerCluster, metadata

UNKNOWN_TOPIC_OR_PARTITION = 3
# Broker 2 is killed and started again: its new life waits out its old session's registration.
SHORT_SESSION = {"zookeeper.session.timeout.ms": 4000}


def start_alone_with_data(cluster: BrokerCluster, topic: str) -> str:
    """Broker 2 alone leads both partitions of ``topic`` and stores five records in each; the topic id."""
    second = cluster.brokers[2]
    second.start()
    cluster.wait_registered({2})
    with AdminClient(second.bootstrap) as admin:
        admin.create_topics([topic], partitions=2)
    cluster.wait_for_metadata(topic, 2)
    for partition in (0, 1):
        produce_values(cluster, topic, partition, 2, [b"old %d" % partition] * 5)
    return layout.parse_topic_id(cluster.zk.get(layout.topic_path(topic))[0])


def delete_while_down(cluster: BrokerCluster, topic: str) -> None:
    """Broker 1 joins; broker 2 dies; the topic is deleted through broker 1 while broker 2 is down."""
    first, second = cluster.brokers[1], cluster.brokers[2]
    first.start()
    cluster.wait_registered({1, 2})
    second.kill()
    with AdminClient(first.bootstrap) as admin:
        admin.delete_topics([topic])
    wait_until(lambda: metadata(first, [topic])["topics"][topic]["error"] == UNKNOWN_TOPIC_OR_PARTITION, 10,
               message="broker 1 forgetting the deleted topic")


def test_logs_of_a_topic_deleted_while_the_broker_was_down_are_removed_when_it_returns(
        zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2, start=False, overrides=SHORT_SESSION)
    start_alone_with_data(cluster, "orders")
    old_dirs = [cluster.brokers[2].partition_dir("orders", p) for p in (0, 1)]
    delete_while_down(cluster, "orders")
    assert all(d.exists() for d in old_dirs)

    cluster.brokers[2].start()
    cluster.wait_registered({1, 2})
    wait_until(lambda: not any(d.exists() for d in old_dirs), 15,
               message="broker 2 deleting the logs of the topic deleted while it was down")
    assert "deleted while this broker was down" in cluster.brokers[2].log_text()


def test_recreated_topic_does_not_serve_an_old_incarnations_log(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2, start=False, overrides=SHORT_SESSION)
    first, second = cluster.brokers[1], cluster.brokers[2]
    old_id = start_alone_with_data(cluster, "orders")
    delete_while_down(cluster, "orders")

    # The name is used again while broker 2 is still down: its registration is stood in for, so the
    # controller gives it partitions of the new incarnation; then broker 2 returns with its old logs.
    stand_in = cluster.zk.create(layout.broker_path(2), layout.broker_registration(second.host, second.port),
                                 ephemeral=True)
    with AdminClient(first.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=2)
    cluster.zk.delete(stand_in)
    second.start()
    cluster.wait_registered({1, 2})
    leaders = cluster.wait_for_metadata("orders", 2)
    new_id = layout.parse_topic_id(cluster.zk.get(layout.topic_path("orders"))[0])
    assert old_id and new_id and new_id != old_id
    on_second = [p for p, leader in leaders.items() if leader == 2]
    assert on_second, f"round-robin over two brokers gives broker 2 a partition: {leaders}"
    for partition in on_second:
        assert fetch_values(cluster, "orders", partition, 2) == []
        produce_values(cluster, "orders", partition, 2, [b"new"])
        assert fetch_values(cluster, "orders", partition, 2) == [b"new"]
    assert "belongs to an earlier topic of that name" in second.log_text()
