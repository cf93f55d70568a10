"""confluent-kafka's (librdkafka 2.x) transactional producer and read_committed consumer against our brokers: commit
and abort across topics and partitions, send_offsets_to_transaction with a consumer group, a zombie fenced by a new
instance, a transaction aborted by the broker's timeout, and (on a 3-broker cluster) markers across brokers and a
coordinator failover mid-transaction."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker.coordinator.coordinator_placement import coordinator_for
from pipeline.client.admin import AdminClient
from pipeline.client.connection import BrokerConnection
from pipeline.protocol.api_keys import ApiKey
from tests.integration.broker.test_replication import SETTINGS as REPLICATION_SETTINGS
from tests.support.broker_metrics import scrape, value
from tests.support.clients import create_topic
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

FAST_ABORTS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 300, "metrics.port": 0}


def transactional_producer(bootstrap: str, transactional_id: str, **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         **config})
    producer.init_transactions(30)
    return producer


def produce(producer: Producer, topic: str, partitions: int, values: list[str]) -> None:
    for index, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=index % partitions)
    producer.flush(30)


def read(bootstrap: str, topics: dict[str, int], isolation: str, quiet_s: float = 2.0) -> set[str]:
    """Every value of ``topics`` ({topic: partitions}) a consumer with ``isolation`` sees, read until it stayed quiet
    for ``quiet_s`` after reaching the end of every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    values: set[str] = set()
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)])
        at_end: set[tuple[str, int]] = set()
        total = sum(topics.values())
        deadline = time.monotonic() + 60
        quiet_since = None
        while time.monotonic() < deadline:
            messages = consumer.consume(num_messages=1000, timeout=0.2)
            for message in messages:
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add((message.topic(), message.partition()))
                        continue
                    raise AssertionError(f"consumer error: {message.error()}")
                values.add(message.value().decode())
            if [m for m in messages if m.error() is None]:
                quiet_since = None
            elif len(at_end) == total:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= quiet_s:
                    return values
        raise AssertionError(f"{isolation} reader did not reach the end of {topics} within 60s")
    finally:
        consumer.close()


def describe(host: str, port: int, transactional_id: str) -> dict:
    with BrokerConnection(host, port) as connection:
        connection.connect()
        response = connection.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]},
                                      version=0)
    return response["transaction_states"][0]


def find_coordinator(host: str, port: int, transactional_id: str) -> int:
    with BrokerConnection(host, port) as connection:
        connection.connect()
        response = connection.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": 1}, version=1)
    assert response["error_code"] == 0, response
    return response["node_id"]


def commit_and_abort(bootstrap: str, prefix: str) -> None:
    """Three transactions over two topics (commit, abort, commit): read_committed sees the committed ones only."""
    topics = {f"{prefix}-a": 3, f"{prefix}-b": 2}
    producer = transactional_producer(bootstrap, f"{prefix}-tx")
    expected: set[str] = set()
    everything: set[str] = set()
    for round_, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for topic, partitions in topics.items():
            values = [f"{topic}/{round_}/{i}" for i in range(12)]
            produce(producer, topic, partitions, values)
            everything.update(values)
            if commit:
                expected.update(values)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    assert read(bootstrap, topics, "read_committed") == expected
    assert read(bootstrap, topics, "read_uncommitted") == everything


# -- a standalone broker -----------------------------------------------------------------------------------

def test_commit_and_abort_across_topics_and_partitions(broker):
    create_topic(broker.bootstrap, "ca-a", 3)
    create_topic(broker.bootstrap, "ca-b", 2)
    commit_and_abort(broker.bootstrap, "ca")
    state = describe(broker.host, broker.port, "ca-tx")
    assert (state["error_code"], state["transaction_state"], state["producer_epoch"]) == (0, "CompleteCommit", 0)


def test_send_offsets_to_transaction_commits_the_groups_offsets_with_the_outputs(broker):
    create_topic(broker.bootstrap, "so-in", 2)
    create_topic(broker.bootstrap, "so-out", 2)
    source = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        source.produce("so-in", value=f"in-{i}".encode(), partition=i % 2)
    source.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "so-group", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("so-in", p, 0) for p in range(2)])
    producer = transactional_producer(broker.bootstrap, "so-tx")
    consumed: list = []
    deadline = time.monotonic() + 30
    while len(consumed) < 40 and time.monotonic() < deadline:
        consumed += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    assert len(consumed) == 40
    # Each transaction holds records of both partitions: the first (aborted) their first ten.
    aborted = [m for m in consumed if m.offset() < 10]
    kept = [m for m in consumed if m.offset() >= 10]
    for batch, commit in ((aborted, False), (kept, True)):
        producer.begin_transaction()
        for message in batch:
            producer.produce("so-out", value=b"out-" + message.value(), partition=message.partition())
        positions = {}
        for message in batch:
            positions[message.partition()] = message.offset() + 1
        producer.send_offsets_to_transaction([TopicPartition("so-in", p, o) for p, o in positions.items()],
                                             consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer.close()
    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "so-group", "enable.auto.commit": False})
    try:
        committed = checker.committed([TopicPartition("so-in", p) for p in range(2)], timeout=30)
    finally:
        checker.close()
    assert {tp.partition: tp.offset for tp in committed} == {0: 20, 1: 20}
    assert read(broker.bootstrap, {"so-out": 2}, "read_committed") == {f"out-{m.value().decode()}" for m in kept}


def test_a_zombie_is_fenced_by_a_new_instance_with_the_same_transactional_id(broker):
    create_topic(broker.bootstrap, "zo", 2)
    zombie = transactional_producer(broker.bootstrap, "zo-tx")
    zombie.begin_transaction()
    produce(zombie, "zo", 2, [f"zombie-{i}" for i in range(10)])
    fresh = transactional_producer(broker.bootstrap, "zo-tx")
    fresh.begin_transaction()
    produce(fresh, "zo", 2, [f"fresh-{i}" for i in range(10)])
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH), error
    assert read(broker.bootstrap, {"zo": 2}, "read_committed") == {f"fresh-{i}" for i in range(10)}
    assert describe(broker.host, broker.port, "zo-tx")["producer_epoch"] == 2


def test_a_transaction_past_its_timeout_is_aborted_by_the_broker(broker_factory):
    broker = broker_factory(overrides=FAST_ABORTS)
    create_topic(broker.bootstrap, "to", 2)
    slow = transactional_producer(broker.bootstrap, "to-tx", **{"transaction.timeout.ms": 2000,
                                                              "message.timeout.ms": 2000})
    slow.begin_transaction()
    produce(slow, "to", 2, [f"late-{i}" for i in range(10)])
    wait_until(lambda: describe(broker.host, broker.port, "to-tx")["transaction_state"] == "CompleteAbort",
               timeout=20, message="the broker did not abort the timed-out transaction")
    with pytest.raises(KafkaException):
        slow.commit_transaction(30)
    after = transactional_producer(broker.bootstrap, "to-tx")
    after.begin_transaction()
    produce(after, "to", 2, [f"after-{i}" for i in range(6)])
    after.commit_transaction(30)
    assert read(broker.bootstrap, {"to": 2}, "read_committed") == {f"after-{i}" for i in range(6)}
    samples = scrape(broker)
    assert value(samples, "kafka_coordinator_transaction_aborted_total", reason="timeout") == 1
    assert value(samples, "kafka_coordinator_transaction_aborted_total", reason="client") == 0
    assert value(samples, "kafka_coordinator_transaction_committed_total") == 1
    assert value(samples, "kafka_coordinator_transaction_producers_fenced_total") == 2
    assert value(samples, "kafka_coordinator_transaction_open_transactions") == 0


# -- a 3-broker cluster ----------------------------------------------------------------------------------

def replicated_topics(cluster, topics: dict[str, int]) -> None:
    with AdminClient(cluster.bootstrap) as admin:
        for topic, partitions in topics.items():
            admin.create_topics(topic, partitions=partitions, replication_factor=3)
    for topic, partitions in topics.items():
        wait_until(lambda: all(len(cluster.partition_state(topic, p)["isr"]) == 3 for p in range(partitions)), 30,
                   message=f"every replica of {topic} in sync")


@pytest.fixture
def tx_cluster(broker_cluster_factory, zk_connect):
    return broker_cluster_factory(zk_connect, size=3, overrides={**REPLICATION_SETTINGS, **FAST_ABORTS})


@pytest.mark.timeout(180)
def test_commit_and_abort_with_partitions_led_by_every_broker(tx_cluster):
    replicated_topics(tx_cluster, {"cl-a": 3, "cl-b": 2})
    leaders = {tx_cluster.partition_state("cl-a", p)["leader"] for p in range(3)}
    assert len(leaders) > 1, "the partitions should be led by several brokers"
    commit_and_abort(tx_cluster.bootstrap, "cl")


@pytest.mark.timeout(180)
def test_a_killed_coordinators_transaction_is_aborted_by_its_successor(tx_cluster):
    topics = {"fo": 6}
    replicated_topics(tx_cluster, topics)
    first = next(iter(tx_cluster.brokers.values()))
    coordinator = find_coordinator(first.host, first.port, "fo-tx")
    before = transactional_producer(tx_cluster.bootstrap, "fo-tx")
    before.begin_transaction()
    produce(before, "fo", 6, [f"committed-{i}" for i in range(12)])
    before.commit_transaction(30)
    before.begin_transaction()
    produce(before, "fo", 6, [f"open-{i}" for i in range(12)])
    tx_cluster.brokers[coordinator].kill()
    live = [b for b in tx_cluster.live()]
    survivor = wait_until(lambda: (lambda c: c if c != coordinator else None)(
        find_coordinator(live[0].host, live[0].port, "fo-tx")), 30, interval=0.2,
        message="FindCoordinator naming a live broker")
    bootstrap = ",".join(b.bootstrap for b in live)
    after = transactional_producer(bootstrap, "fo-tx")
    after.begin_transaction()
    produce(after, "fo", 6, [f"after-{i}" for i in range(12)])
    after.commit_transaction(30)
    address = tx_cluster.brokers[survivor]
    # Its markers follow the answer to EndTxn.
    state = wait_until(lambda: (lambda s: s if s["transaction_state"] == "CompleteCommit" else None)(
        describe(address.host, address.port, "fo-tx")), 30, interval=0.2, message="the commit completed")
    assert state["producer_epoch"] == 2
    expected = {f"committed-{i}" for i in range(12)} | {f"after-{i}" for i in range(12)}
    assert read(bootstrap, topics, "read_committed") == expected


@pytest.mark.timeout(180)
def test_a_commit_prepared_by_a_killed_coordinator_is_completed_by_its_successor(broker_cluster_factory, zk_connect,
                                                                                 tmp_path):
    cluster = broker_cluster_factory(zk_connect, size=3, overrides=REPLICATION_SETTINGS, start=False)
    coordinator = coordinator_for("pp-tx", cluster.brokers)
    pause_file = tmp_path / "paused"
    cluster.brokers[coordinator].overrides.update({"testing.pause.at": "transaction-prepared",
                                                   "testing.pause.file": str(pause_file)})
    cluster.start()
    topics = {"pp": 6}
    replicated_topics(cluster, topics)
    producer = transactional_producer(cluster.bootstrap, "pp-tx")
    producer.begin_transaction()
    produce(producer, "pp", 6, [f"prepared-{i}" for i in range(12)])

    def kill_when_paused() -> None:
        wait_until(pause_file.exists, 60, message="the coordinator pausing after PrepareCommit")
        cluster.brokers[coordinator].kill()
    killer = threading.Thread(target=kill_when_paused)
    killer.start()
    try:
        # The client's EndTxn goes unanswered; it finds the successor, which completes the stored PrepareCommit.
        producer.commit_transaction(90)
    finally:
        killer.join()
    live = cluster.live()
    successor = find_coordinator(live[0].host, live[0].port, "pp-tx")
    assert successor != coordinator
    address = cluster.brokers[successor]
    wait_until(lambda: describe(address.host, address.port, "pp-tx")["transaction_state"] == "CompleteCommit", 30,
               interval=0.2, message="the successor completing the commit")
    bootstrap = ",".join(b.bootstrap for b in live)
    assert read(bootstrap, topics, "read_committed") == {f"prepared-{i}" for i in range(12)}
