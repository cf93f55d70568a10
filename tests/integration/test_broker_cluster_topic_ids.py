"""A topic deleted while one of its brokers was down, then created again: the old data must not come back.

Each incarnation of a topic name gets a new topic id (in /brokers/topics/<topic>); a partition directory
records the id it belongs to (partition.metadata), and a broker deletes a log of an earlier incarnation
before it leads the new partition.
"""

from __future__ import annotations

from pipeline.client.admin import AdminClient
from pipeline.zk import layout
from tests.integration.test_broker_cluster import fetch_values, produce_values
from tests.support import wait_until
from tests.support.cluster import metadata

UNKNOWN_TOPIC_OR_PARTITION = 3


def test_recreated_topic_does_not_serve_an_old_incarnations_log(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2, start=False)
    first, second = cluster.brokers[1], cluster.brokers[2]
    # Broker 2 alone: it leads both partitions of the first incarnation.
    second.start()
    cluster.wait_registered({2})
    with AdminClient(second.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=2)
    cluster.wait_for_metadata("orders", 2)
    old_id = layout.parse_topic_id(cluster.zk.get(layout.topic_path("orders"))[0])
    for partition in (0, 1):
        produce_values(cluster, "orders", partition, 2, [b"old %d" % partition] * 5)

    # Broker 1 joins; broker 2 dies; the topic is deleted through broker 1 while broker 2 is down.
    first.start()
    cluster.wait_registered({1, 2})
    second.kill()
    with AdminClient(first.bootstrap) as admin:
        admin.delete_topics(["orders"])
    wait_until(lambda: metadata(first, ["orders"])["topics"]["orders"]["error"] == UNKNOWN_TOPIC_OR_PARTITION, 10,
               message="broker 1 forgetting the deleted topic")

    # Broker 2 returns with its old logs on disk; the name is used again.
    second.start()
    cluster.wait_registered({1, 2})
    with AdminClient(first.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=2)
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
