"""Transactions across clients: confluent-kafka's read_committed consumer reads what our transactional producer
wrote, and our read_committed consumers read what confluent-kafka's transactional producer wrote.

In both directions an aborted transaction comes first in each partition, so a reader that showed aborted
records would show them among the first it returns.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer as ConfluentProducer

from pipeline.client.consumer import Consumer
from pipeline.client.producer import Producer, ProducerData
from tests.support.clients import confluent_consume, create_topic
from tests.support.polling import wait_until
from pipeline.client.simple_consumer import SimpleConsumer

TIMEOUT = 30.0
PARTITIONS = (0, 1, 2)


def settled(broker, topic: str) -> None:
    with SimpleConsumer(broker.host, broker.port) as consumer:
        for partition in PARTITIONS:
            wait_until(lambda: consumer.get_offsets_before(topic, partition, -1, 1, isolation_level=1)
                       == consumer.get_offsets_before(topic, partition, -1, 1), timeout=TIMEOUT,
                       message=f"{topic}-{partition} still has an open transaction")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_confluent_read_committed_reads_what_our_producer_committed(broker, mode: str) -> None:
    topic = f"ours-to-confluent-{mode}"
    create_topic(broker.bootstrap, topic, len(PARTITIONS))
    committed = []
    with Producer({"metadata.broker.list": broker.bootstrap, "transactional.id": f"ours-{mode}",
                   "producer.type": mode, "queue.time": 5}) as producer:
        producer.init_transactions(TIMEOUT)
        for round_, commit in enumerate([False, True, False, True]):
            producer.begin_transaction()
            for partition in PARTITIONS:
                values = [b"r%d-p%d-%d" % (round_, partition, i) for i in range(5)]
                producer.send(ProducerData(topic, None, values, partition=partition))
                if commit:
                    committed += [(partition, v) for v in values]
            if mode == "async":
                producer.flush(TIMEOUT)  # the aborted rounds reach the log too
            if commit:
                producer.commit_transaction(TIMEOUT)
            else:
                producer.abort_transaction(TIMEOUT)
    settled(broker, topic)
    records = confluent_consume(broker.bootstrap, topic, PARTITIONS, len(committed), timeout=TIMEOUT,
                                **{"isolation.level": "read_committed"})
    assert sorted((r.partition, r.value) for r in records) == sorted(committed)
    uncommitted = confluent_consume(broker.bootstrap, topic, PARTITIONS, 2 * len(committed), timeout=TIMEOUT,
                                    **{"isolation.level": "read_uncommitted"})
    assert len(uncommitted) == 2 * len(committed)


def test_our_read_committed_consumer_reads_what_confluent_committed(broker) -> None:
    topic = "confluent-to-ours"
    create_topic(broker.bootstrap, topic, len(PARTITIONS))
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": "confluent-tx",
                                  "linger.ms": 5})
    producer.init_transactions(TIMEOUT)
    committed = []
    for round_, commit in enumerate([False, True, False, True]):
        producer.begin_transaction()
        for partition in PARTITIONS:
            values = [b"c%d-p%d-%d" % (round_, partition, i) for i in range(5)]
            for value in values:
                producer.produce(topic, value=value, partition=partition)
            if commit:
                committed += [(partition, v) for v in values]
        producer.flush(TIMEOUT)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)
    settled(broker, topic)
    with Consumer({"metadata.broker.list": broker.bootstrap, "isolation.level": "read_committed",
                   "consumer.timeout.ms": 1500}, partitions={(topic, p): 0 for p in PARTITIONS}) as consumer:
        seen = [(m.partition, m.value) for m in consumer]
    assert sorted(seen) == sorted(committed)
    with Consumer({"metadata.broker.list": broker.bootstrap, "consumer.timeout.ms": 1500},
                  partitions={(topic, p): 0 for p in PARTITIONS}) as consumer:
        assert len(list(consumer)) == 2 * len(committed)
