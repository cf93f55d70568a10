"""Producer with zookeeper.connect: brokers and leaders from ZooKeeper, following a broker that dies and returns."""

from __future__ import annotations

from pipeline.client.partitioner import DefaultPartitioner
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import create_topic
from tests.support.polling import wait_until


def read_at_leader(cluster: BrokerCluster, topic: str, partition: int) -> list[bytes]:
    """Every value of one partition, read from the broker ZooKeeper names as its leader."""
    leader = cluster.partition_state(topic, partition)["leader"]
    broker = cluster.brokers[leader]
    with SimpleConsumer(broker.host, broker.port) as consumer:
        return [m.value for m in consumer.fetch(FetchRequest(topic, partition, 0))]


def test_producer_sends_each_partition_to_its_leader_found_in_zookeeper(cluster: BrokerCluster,
                                                                        zk_connect: str) -> None:
    create_topic(cluster, "orders", 6)
    leaders = {p: cluster.partition_state("orders", p)["leader"] for p in range(6)}
    assert set(leaders.values()) == {1, 2, 3}, "the controller spread the leaders over the three brokers"
    keys = [f"user-{i}".encode() for i in range(60)]
    with Producer({"zk.connect": zk_connect, "request.required.acks": 1}) as producer:
        assert producer.cluster.brokers() == {b: (p.host, p.port) for b, p in cluster.brokers.items()}
        for key in keys:
            producer.send(ProducerData("orders", key, [key + b":v"]))
    partitioner = DefaultPartitioner()
    expected: dict[int, list[bytes]] = {p: [] for p in range(6)}
    for key in keys:
        expected[partitioner.partition(key, 6)].append(key + b":v")
    for partition in range(6):
        assert read_at_leader(cluster, "orders", partition) == expected[partition]


def test_producer_moves_to_available_partitions_and_follows_a_returning_broker(cluster: BrokerCluster,
                                                                              zk_connect: str) -> None:
    create_topic(cluster, "events", 6)
    led_by_2 = sorted(p for p in range(6) if cluster.partition_state("events", p)["leader"] == 2)
    assert led_by_2
    with Producer({"zookeeper.connect": zk_connect, "request.required.acks": 1, "retry.backoff.ms": 50}) as producer:
        producer.send([ProducerData("events", None, [b"before"]) for _ in range(30)])
        cluster.brokers[2].kill()
        wait_until(lambda: all(cluster.partition_state("events", p)["leader"] == -1 for p in led_by_2), 30,
                   message="broker 2's partitions going offline")
        wait_until(lambda: all(producer.cluster.leader("events", p) == -1 for p in led_by_2), 10,
                   message="the producer's watches seeing the partitions offline")
        # Keyless data goes to partitions that have a leader: every send succeeds.
        for i in range(60):
            producer.send(ProducerData("events", None, [f"during-{i}".encode()]))
        cluster.brokers[2].start()
        wait_until(lambda: all(cluster.partition_state("events", p)["leader"] >= 0 for p in led_by_2), 30,
                   message="broker 2's partitions back online")
        new_leaders = {p: cluster.partition_state("events", p)["leader"] for p in led_by_2}
        # A key that hashes to a partition of the returned broker: the producer follows the new leader.
        key = next(k for k in (f"k{i}".encode() for i in range(1000))
                   if DefaultPartitioner().partition(k, 6) == led_by_2[0])
        producer.send(ProducerData("events", key, [b"after"]))
    values: dict[int, list[bytes]] = {p: read_at_leader(cluster, "events", p) for p in range(6)}
    during = [v for p, vs in values.items() for v in vs if v.startswith(b"during-")]
    assert sorted(during) == sorted(f"during-{i}".encode() for i in range(60))
    assert all(not v.startswith(b"during-") for p in led_by_2 for v in values[p])
    assert sum(v == b"before" for vs in values.values() for v in vs) == 30
    assert values[led_by_2[0]][-1] == b"after"
    assert new_leaders[led_by_2[0]] == cluster.partition_state("events", led_by_2[0])["leader"]
