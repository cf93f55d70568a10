"""Our Consumer against the real broker: it blocks in long polls until data arrives, follows several
partitions, ends an idle iteration after consumer.timeout.ms, resets after retention, survives a restart."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.connection import BrokerConnection
from pipeline.client.consumer import Consumer
from pipeline.client.simple_consumer import SimpleConsumer
from pipeline.protocol.api_keys import ApiKey
from pipeline.records import encode_batch
from tests.support import wait_until
from tests.support.clients import create_topic
from tests.support.wire import KafkaConnection, produce


class CountingCluster(Cluster):
    """A Cluster whose data connections count the Fetch requests they send."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(StaticBrokerList(bootstrap), client_id="test-consumer")
        self.fetches = 0

    def connection(self, node_id: int) -> BrokerConnection:
        connection = super().connection(node_id)
        if not hasattr(connection, "counted_send"):
            send = connection.send

            def counted_send(api_key: int, body: dict, **kwargs: object) -> int:
                if api_key == ApiKey.FETCH:
                    self.fetches += 1
                return send(api_key, body, **kwargs)

            connection.counted_send = counted_send
            connection.send = counted_send
        return connection


def produce_values(broker, topic: str, partition: int, values: list[bytes]) -> int:
    """Produce ``values`` as one batch; return the offset after them."""
    with KafkaConnection(broker.host, broker.port) as conn:
        result = produce(conn, topic, partition, encode_batch(values))
    assert result.error_code == 0, result.error_code
    return result.base_offset + len(values)


@pytest.mark.timeout(60)
def test_the_consumer_blocks_until_data_arrives_and_returns_promptly(broker):
    create_topic(broker.bootstrap, "waiting", 1)
    cluster = CountingCluster(broker.bootstrap)
    # A 5 s long poll: without the broker waking the fetch when data lands, delivery would take ~5 s.
    config = {"metadata.broker.list": broker.bootstrap, "fetch.wait.max.ms": 5000, "consumer.timeout.ms": -1}
    produced_at: list[float] = []

    def produce_once_polling() -> None:
        wait_until(lambda: cluster.fetches >= 1, timeout=30, interval=0.01, message="the consumer to be polling")
        produced_at.append(time.monotonic())
        produce_values(broker, "waiting", 0, [b"hello", b"world"])

    with Consumer(config, partitions={("waiting", 0): 0}, cluster=cluster) as consumer:
        producer = threading.Thread(target=produce_once_polling)
        producer.start()
        try:
            records = iter(consumer)
            first = next(records)
            received_at = time.monotonic()
            second = next(records)
        finally:
            producer.join(timeout=30)
    assert (first.value, second.value) == (b"hello", b"world")
    assert (first.topic, first.partition, first.offset) == ("waiting", 0, 0)
    assert produced_at and produced_at[0] <= received_at < produced_at[0] + 2.0


@pytest.mark.timeout(60)
def test_close_from_another_thread_ends_a_blocked_iteration(broker):
    create_topic(broker.bootstrap, "closing", 1)
    cluster = CountingCluster(broker.bootstrap)
    config = {"metadata.broker.list": broker.bootstrap, "fetch.wait.max.ms": 500, "consumer.timeout.ms": -1}
    consumer = Consumer(config, partitions={("closing", 0): 0}, cluster=cluster)
    closed_at: list[float] = []

    def close_once_polling() -> None:
        wait_until(lambda: cluster.fetches >= 1, timeout=30, interval=0.01, message="the consumer to be polling")
        closed_at.append(time.monotonic())
        consumer.close()

    closer = threading.Thread(target=close_once_polling)
    closer.start()
    try:
        assert list(consumer) == []
        ended_at = time.monotonic()
    finally:
        closer.join(timeout=30)
        consumer.close()
    assert closed_at and ended_at - closed_at[0] < 3.0


class ClosingCluster(CountingCluster):
    """Closes ``consumer`` from another thread, and waits for that close, right after a data connection has read
    the body of a Fetch answer: the interleaving in which a close() from another thread lands between the iterating
    thread's read of a long-poll answer and its bookkeeping of that answer."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.consumer: Consumer | None = None
        self.closes = 0

    def connection(self, node_id: int) -> BrokerConnection:
        connection = super().connection(node_id)
        if not hasattr(connection, "closing_read"):
            read_exactly = connection._read_exactly

            def closing_read(size: int) -> memoryview:
                data = read_exactly(size)
                if size > 4 and self.fetches and self.consumer is not None and not self.closes:
                    self.closes += 1
                    closer = threading.Thread(target=self.consumer.close)
                    closer.start()
                    closer.join(timeout=10)
                return data

            connection.closing_read = closing_read
            connection._read_exactly = closing_read
        return connection


@pytest.mark.timeout(60)
def test_close_from_another_thread_as_a_long_poll_is_read_ends_the_iteration_cleanly(broker):
    """A close() from another thread between the read of a long-poll answer and its bookkeeping: the iterating
    thread ends its iteration without an exception (its connection is not pulled away under it), and the
    connections end closed."""
    create_topic(broker.bootstrap, "close-race", 1)
    config = {"metadata.broker.list": broker.bootstrap, "fetch.wait.max.ms": 200, "consumer.timeout.ms": -1}
    cluster = ClosingCluster(broker.bootstrap)
    consumer = Consumer(config, partitions={("close-race", 0): 0}, cluster=cluster)
    cluster.consumer = consumer
    try:
        assert list(consumer) == []
    finally:
        consumer.close()
    assert cluster.closes == 1
    assert not any(c.connected for c in list(cluster._connections.values())), "connections left open"

def test_the_consumer_follows_several_partitions_in_order(broker):
    create_topic(broker.bootstrap, "spread", 3)
    expected = {}
    for partition in range(3):
        expected[partition] = [f"p{partition}-{i}".encode() for i in range(20 * (partition + 1))]
        for start in range(0, len(expected[partition]), 10):
            produce_values(broker, "spread", partition, expected[partition][start:start + 10])
    config = {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", "consumer.timeout.ms": 1000,
              "fetch.size": 256}
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(3)}
    with Consumer(config, topics=["spread"]) as consumer:
        for record in consumer:
            got[record.partition].append((record.offset, record.value))
        positions = [consumer.position("spread", p) for p in range(3)]
    for partition in range(3):
        assert [offset for offset, _ in got[partition]] == list(range(len(expected[partition])))
        assert [value for _, value in got[partition]] == expected[partition]
    assert positions == [20, 40, 60]


def test_consumer_timeout_ends_an_idle_iteration(broker):
    create_topic(broker.bootstrap, "idle", 1)
    produce_values(broker, "idle", 0, [b"a", b"b", b"c"])
    config = {"metadata.broker.list": broker.bootstrap, "consumer.timeout.ms": 500, "fetch.wait.max.ms": 100}
    with Consumer(config, partitions={("idle", 0): 1}) as consumer:
        started = time.monotonic()
        assert [r.value for r in consumer] == [b"b", b"c"]
        elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 5
        produce_values(broker, "idle", 0, [b"d"])
        assert [r.value for r in consumer] == [b"d"]


def test_an_offset_removed_by_retention_restarts_from_the_earliest(broker_factory):
    broker = broker_factory(overrides={"log.segment.bytes": 8192, "log.retention.bytes": 16384,
                                       "log.retention.check.interval.ms": 200})
    create_topic(broker.bootstrap, "expiring", 1)
    end = 0
    for b in range(60):
        end = produce_values(broker, "expiring", 0, [f"b{b}r{r}".encode().ljust(400, b".") for r in range(5)])
    config = {"metadata.broker.list": broker.bootstrap, "auto.offset.reset": "smallest", "consumer.timeout.ms": 1000}
    with Consumer(config, partitions={("expiring", 0): 0}) as consumer:
        with SimpleConsumer(broker.host, broker.port) as simple:
            wait_until(lambda: simple.get_offsets_before("expiring", 0, -2, 1)[0] > 0, timeout=20,
                       message="retention to delete the oldest segments")
        offsets = [r.offset for r in consumer]
    assert offsets[0] > 0 and offsets == list(range(offsets[0], end))


def test_the_consumer_continues_after_a_broker_restart(broker):
    create_topic(broker.bootstrap, "restarting", 1)
    produce_values(broker, "restarting", 0, [b"before-%d" % i for i in range(5)])
    config = {"metadata.broker.list": broker.bootstrap, "consumer.timeout.ms": 15000,
              "refresh.leader.backoff.ms": 100, "fetch.wait.max.ms": 200}
    with Consumer(config, partitions={("restarting", 0): 0}) as consumer:
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == 5:
                break
        broker.restart()
        produce_values(broker, "restarting", 0, [b"after-%d" % i for i in range(3)])
        for record in consumer:
            values.append(record.value)
            if len(values) == 8:
                break
    assert values == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(3)]
