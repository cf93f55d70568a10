"""Stock idempotent producers carry on after retention deleted every batch they wrote.

Retention that removes all of a producer's batches also removes its state, so its next batch, at
whatever sequence it has reached, comes from a producer the broker does not know. Kafka (2.4+,
KIP-360) accepts that batch; so must we, or kafka-python and librdkafka fail with
OUT_OF_ORDER_SEQUENCE_NUMBER. Each test writes with one producer instance before and after such
a retention, and checks every send succeeds and nothing is written twice.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaProducer

from pipeline.client import SimpleConsumer
from tests.support import wait_until
from tests.support.clients import create_topic

TOPIC = "idempotent"
ROUND = 5
VALUE = b"v" * 60  # every batch is larger than half a segment: each append rolls a new one


@pytest.fixture
def broker(broker_factory):
    return broker_factory(overrides={"log.segment.bytes": 100, "log.retention.ms": 300,
                                     "log.retention.check.interval.ms": 100})


def let_retention_delete_the_first_round(broker) -> None:
    """Write one batch of another producer (so the first round's segments are all inactive), then
    wait until retention deleted them."""
    filler = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks=1)
    try:
        assert filler.send(TOPIC, VALUE, partition=0).get(timeout=10).offset == ROUND
    finally:
        filler.close(timeout=10)
    with SimpleConsumer(broker.host, broker.port) as simple:
        wait_until(lambda: simple.get_offsets_before(TOPIC, 0, -2, 1)[0] == ROUND, timeout=20,
                   message="retention to delete the idempotent producer's segments")
        assert simple.get_offsets_before(TOPIC, 0, -1, 1)[0] == ROUND + 1


def log_end_offset(broker) -> int:
    with SimpleConsumer(broker.host, broker.port) as simple:
        return simple.get_offsets_before(TOPIC, 0, -1, 1)[0]


def test_kafka_python_idempotent_producer_across_retention(broker):
    create_topic(broker.bootstrap, TOPIC, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all", linger_ms=0)
    try:
        first = [producer.send(TOPIC, VALUE, partition=0).get(timeout=10).offset for _ in range(ROUND)]
        let_retention_delete_the_first_round(broker)
        second = [producer.send(TOPIC, VALUE, partition=0).get(timeout=10).offset for _ in range(ROUND)]
    finally:
        producer.close(timeout=10)
    assert first == list(range(ROUND))
    assert second == list(range(ROUND + 1, 2 * ROUND + 1))
    assert log_end_offset(broker) == 2 * ROUND + 1


def test_confluent_kafka_idempotent_producer_across_retention(broker):
    create_topic(broker.bootstrap, TOPIC, 1)
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                                  "linger.ms": 0, "message.timeout.ms": 15_000})
    reports: list[tuple[object, int]] = []

    def send_round() -> list[int]:
        reports.clear()
        for _ in range(ROUND):
            producer.produce(TOPIC, VALUE, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
            assert producer.flush(15) == 0
        assert [err for err, _ in reports] == [None] * ROUND
        return [offset for _, offset in reports]

    assert send_round() == list(range(ROUND))
    let_retention_delete_the_first_round(broker)
    assert send_round() == list(range(ROUND + 1, 2 * ROUND + 1))
    assert log_end_offset(broker) == 2 * ROUND + 1
