"""Transactions on a three-broker cluster: our producer finding its brokers through ZooKeeper commits and aborts
across partitions led by different brokers (markers go from the coordinator to other leaders), and the paper's
ConsumerConnector with isolation.level=read_committed reads exactly the committed records."""

from __future__ import annotations

from pipeline.client.consumer_stream import ConsumerTimeout
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.simple_consumer import SimpleConsumer
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import connector, create_topic
from tests.support.polling import wait_until

TIMEOUT = 30.0
PARTITIONS = 3


def test_consumer_connector_reads_committed_transactions_only(cluster: BrokerCluster, zk_connect: str) -> None:
    topic = "tx-cluster"
    create_topic(cluster, topic, PARTITIONS)
    committed = []
    with Producer({"zookeeper.connect": zk_connect, "transactional.id": "tx-cluster", "producer.type": "async",
                   "queue.time": 5}) as producer:
        producer.init_transactions(TIMEOUT)
        for round_, commit in enumerate([True, False, True, False, True]):
            producer.begin_transaction()
            for partition in range(PARTITIONS):
                values = [b"r%d-p%d-%d" % (round_, partition, i) for i in range(5)]
                producer.send(ProducerData(topic, None, values, partition=partition))
                if commit:
                    committed += values
            producer.flush(TIMEOUT)
            producer.commit_transaction(TIMEOUT) if commit else producer.abort_transaction(TIMEOUT)
    for partition in range(PARTITIONS):
        leader = cluster.brokers[cluster.partition_state(topic, partition)["leader"]]
        with SimpleConsumer(leader.host, leader.port) as consumer:
            wait_until(lambda: consumer.get_offsets_before(topic, partition, -1, 1, isolation_level=1)
                       == consumer.get_offsets_before(topic, partition, -1, 1), timeout=TIMEOUT,
                       message=f"{topic}-{partition} without an open transaction")
    group = connector(zk_connect, "tx-readers", **{"isolation.level": "read_committed", "consumer.timeout.ms": 2000})
    seen = []
    try:
        (stream,) = group.create_message_streams({topic: 1})[topic]
        try:
            for record in stream:
                seen.append(record.value)
        except ConsumerTimeout:
            pass
    finally:
        group.shutdown()
    assert sorted(seen) == sorted(committed)
