"""confluent-kafka's consume-transform-produce with send_offsets_to_transaction from a consumer that subscribed
(so TxnOffsetCommit v3 carries its member id and generation), on a standalone broker and a 3-broker cluster: a
new consumer of the group starts where the committed transaction left the offsets, not where the aborted one
would have; a read_committed consumer (OffsetFetch v7 with RequireStable) waits for an open transaction's
offsets instead of starting before them."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.clients import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS, PER_PARTITION = 2, 20


def group_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    return consumer


def consume(consumer: Consumer, count: int, timeout: float = 60) -> list:
    messages: list = []
    deadline = time.monotonic() + timeout
    while len(messages) < count and time.monotonic() < deadline:
        for message in consumer.consume(100, timeout=0.5):
            assert message.error() is None, message.error()
            messages.append(message)
    assert len(messages) >= count, f"{len(messages)} of {count} messages consumed"
    return messages


def transform_in_two_transactions(bootstrap: str, group: str, source: str, target: str) -> None:
    """Consume every record of ``source`` in ``group``; write the first half's outputs and offsets in a committed
    transaction, the second half's in an aborted one."""
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, target, PARTITIONS)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(PARTITIONS * PER_PARTITION):
        plain.produce(source, value=f"in-{i}".encode(), partition=i % PARTITIONS)
    assert plain.flush(30) == 0
    consumer = group_consumer(bootstrap, group, source)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-tx", "linger.ms": 5})
    producer.init_transactions(30)
    try:
        consumed = consume(consumer, PARTITIONS * PER_PARTITION)
        half = PER_PARTITION // 2
        for batch, commit in (([m for m in consumed if m.offset() < half], True),
                              ([m for m in consumed if m.offset() >= half], False)):
            producer.begin_transaction()
            for message in batch:
                producer.produce(target, value=b"out-" + message.value(), partition=message.partition())
            positions = {m.partition(): m.offset() + 1 for m in batch}
            producer.send_offsets_to_transaction([TopicPartition(source, p, o) for p, o in positions.items()],
                                                 consumer.consumer_group_metadata(), 30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
    finally:
        consumer.close()


def check_the_group_resumes_after_the_committed_transaction(bootstrap: str, group: str, source: str) -> None:
    half = PER_PARTITION // 2
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = checker.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        checker.close()
    assert {tp.partition: tp.offset for tp in committed} == {p: half for p in range(PARTITIONS)}
    successor = group_consumer(bootstrap, group, source)
    try:
        resumed = consume(successor, PARTITIONS * (PER_PARTITION - half))
    finally:
        successor.close()
    first = {}
    for message in resumed:
        first.setdefault(message.partition(), message.offset())
    assert first == {p: half for p in range(PARTITIONS)}
    assert sorted((m.partition(), m.offset()) for m in resumed) == [
        (p, o) for p in range(PARTITIONS) for o in range(half, PER_PARTITION)]


def test_a_new_consumer_resumes_from_the_committed_transactions_offsets(broker):
    transform_in_two_transactions(broker.bootstrap, "eo-group", "eo-in", "eo-out")
    check_the_group_resumes_after_the_committed_transaction(broker.bootstrap, "eo-group", "eo-in")


def test_the_same_on_a_three_broker_cluster(cluster):
    transform_in_two_transactions(cluster.bootstrap, "eo-cluster-group", "eo-cluster-in", "eo-cluster-out")
    check_the_group_resumes_after_the_committed_transaction(cluster.bootstrap, "eo-cluster-group", "eo-cluster-in")


def test_a_read_committed_consumer_waits_for_the_open_transactions_offsets(broker):
    """librdkafka's read_committed consumer fetches offsets with RequireStable: while the transaction that committed
    the group's offsets is open it gets UNSTABLE_OFFSET_COMMIT and asks again, so it starts at the transaction's
    offsets once committed, not at the offsets before it."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "wait-in", 1)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(PER_PARTITION):
        plain.produce("wait-in", value=f"in-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    first = group_consumer(bootstrap, "wait-group", "wait-in")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "wait-tx"})
    producer.init_transactions(30)
    try:
        consume(first, PER_PARTITION)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition("wait-in", 0, 15)], first.consumer_group_metadata(), 30)
    finally:
        first.close()
    successor = group_consumer(bootstrap, "wait-group", "wait-in")
    try:
        # Not a record while the transaction is open, from the assignment on: the consumer's offset fetch is
        # answered unstable (without RequireStable it would start at the earliest offset).
        early: list = []
        deadline = time.monotonic() + 30
        while not successor.assignment() and time.monotonic() < deadline:
            early += [m for m in successor.consume(100, timeout=0.5) if m.error() is None]
        assert successor.assignment(), "the successor was not assigned the partition"
        quiet_until = time.monotonic() + 3
        while time.monotonic() < quiet_until:
            early += [m for m in successor.consume(100, timeout=0.5) if m.error() is None]
        assert early == []
        producer.commit_transaction(30)
        resumed = consume(successor, PER_PARTITION - 15)
    finally:
        successor.close()
    assert [m.offset() for m in resumed] == list(range(15, PER_PARTITION))
