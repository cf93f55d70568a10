"""Our clients while the ZooKeeper server is stopped (SIGSTOP): sends go on, consumers pause, shutdown ends."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, TypeVar

from pipeline.client.consumer import ConsumerRecord
from pipeline.client.consumer_stream import ConsumerTimeout, KafkaStream
from pipeline.client.producer import Producer, ProducerData
from pipeline.zk.server import ZooKeeperServer
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import connector, create_topic
from tests.support.polling import wait_until
from tests.support.zookeeper import frozen, unique_chroot

T = TypeVar("T")

# Kept short so that a call hanging on ZooKeeper shows within the test's own bounds.
ZK_CLIENT = {"zookeeper.connection.timeout.ms": 2000, "zookeeper.session.timeout.ms": 4000}


def within(seconds: float, call: Callable[[], T], what: str) -> T:
    """``call()`` on a thread; its result, or a failure if it did not return within ``seconds``."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the test's thread below
            outcome.append((False, exc))

    thread = threading.Thread(target=run, daemon=True, name=what)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{what} did not complete within {seconds}s"
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def next_record(stream: KafkaStream) -> ConsumerRecord | None:
    try:
        return next(stream)
    except ConsumerTimeout:
        return None


def drain(stream: KafkaStream, into: set[bytes]) -> set[bytes]:
    record = next_record(stream)
    while record is not None:
        into.add(record.value)
        record = next_record(stream)
    return into


def test_sends_and_shutdown_complete_while_zookeeper_is_stopped_and_all_resumes_after(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        zk_connect = server.connect_string + unique_chroot()
        # The broker's session outlives the outage; the clients' (4 s) may not, and must recover.
        brokers = BrokerCluster(tmp_path / "cluster", zk_connect, 1,
                                {"zookeeper.session.timeout.ms": 60000, "num.partitions": 1})
        try:
            brokers.start()
            create_topic(brokers, "events", 2)
            run_outage(server, brokers, zk_connect)
        finally:
            brokers.stop()


def run_outage(server: ZooKeeperServer, brokers: BrokerCluster, zk_connect: str) -> None:
    """Clients working, ZooKeeper stopped under them, then back."""
    # Metadata older than 200 ms is refreshed: during the outage every send finds it stale.
    settings = {"zookeeper.connect": zk_connect, "request.required.acks": 1, "request.timeout.ms": 5000,
                "topic.metadata.refresh.interval.ms": 200, **ZK_CLIENT}
    producer = Producer(settings)
    async_producer = Producer({**settings, "producer.type": "async", "queue.time": 5})
    reader = connector(zk_connect, "readers", **ZK_CLIENT)
    leaver = connector(zk_connect, "leavers", **ZK_CLIENT)
    try:
        reader_stream = reader.create_message_streams({"events": 1})["events"][0]
        leaver_stream = leaver.create_message_streams({"events": 1})["events"][0]
        for i in range(4):
            producer.send(ProducerData("events", None, [f"before-{i}".encode()]))
        async_producer.send(ProducerData("events", None, [b"before-async"]))
        assert async_producer.flush(10)
        before = {f"before-{i}".encode() for i in range(4)} | {b"before-async"}
        seen: set[bytes] = set()
        wait_until(lambda: before <= drain(reader_stream, seen), 30, message="the reader reading what came before")
        wait_until(lambda: next_record(leaver_stream), 30, message="the leaver reading something")
        with frozen(server):
            within(8, lambda: producer.send(ProducerData("events", None, [b"during-0"])),
                   "a keyless send to the known leader while ZooKeeper is stopped")
            wait_until(lambda: not reader.zookeeper.connected, 15,
                       message="the reader's ZooKeeper client noticing the outage")
            within(8, lambda: producer.send(ProducerData("events", None, [b"during-1"])),
                   "a keyless send once ZooKeeper is known to be unreachable")
            async_producer.send(ProducerData("events", None, [b"during-async"]))
            assert within(8, lambda: async_producer.flush(6), "an async keyless send"), "the async send was not flushed"
            assert async_producer.failed_messages == 0
            # Its ownerships may be gone: the reader hands out nothing (during-* sit on the broker).
            assert next_record(reader_stream) is None, "records handed out while ownership is uncertain"
            within(20, leaver.shutdown, "the connector shutdown")
        producer.send(ProducerData("events", None, [b"after"]))
        expected = {b"during-0", b"during-1", b"during-async", b"after"}
        wait_until(lambda: expected <= drain(reader_stream, seen), 60,
                   message=lambda: f"the reader resuming after the outage (has {sorted(seen)})")
    finally:
        reader.shutdown()
        leaver.shutdown()
        producer.close()
        async_producer.close()
