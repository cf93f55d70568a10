"""The controller and the metadata cache in-process against a real ZooKeeper, brokers stood in by znodes."""

from __future__ import annotations

import asyncio
from typing import Iterator

import pytest
from kazoo.client import KazooClient

from broker.cluster.controller import KafkaController
from broker.cluster.metadata_cache import PartitionState, ZkMetadataCache
from pipeline.protocol.errors import ErrorCode
from pipeline.zk import layout
from pipeline.zk.client import connect
from tests.support import wait_until
from tests.support.zookeeper import expire_session


@pytest.fixture
def clients(zk_connect: str) -> Iterator[list[KazooClient]]:
    """Kazoo clients on the test's chroot (4 of them), with the persistent layout created."""
    opened = [connect(zk_connect, session_timeout_s=4) for _ in range(4)]
    for path in layout.PERSISTENT_PATHS:
        opened[0].ensure_path(path)
    yield opened
    for client in opened:
        client.stop()
        client.close()


def register(client: KazooClient, broker_id: int) -> None:
    client.create(layout.broker_path(broker_id), layout.broker_registration("127.0.0.1", 9000 + broker_id),
                  ephemeral=True)


def state(client: KazooClient, topic: str, partition: int) -> dict:
    return layout.decode(client.get(layout.partition_state_path(topic, partition))[0])


def controller_of(client: KazooClient) -> int | None:
    if client.exists(layout.CONTROLLER) is None:
        return None
    return layout.decode(client.get(layout.CONTROLLER)[0]).get("brokerid")


def test_one_controller_is_elected_and_another_takes_over_with_a_higher_epoch(clients):
    first, second = KafkaController(clients[0], 1), KafkaController(clients[1], 2)
    try:
        first.start()
        wait_until(lambda: controller_of(clients[3]) == 1, 10, message="broker 1 elected")
        second.start()
        assert wait_until(lambda: first.is_active, 5, message="broker 1 acting") and not second.is_active
        assert clients[3].get(layout.CONTROLLER_EPOCH)[0] == b"1"
        first.stop()
        clients[0].stop()
        wait_until(lambda: controller_of(clients[3]) == 2, 10, message="broker 2 taking over")
        wait_until(lambda: second.is_active, 5, message="broker 2 acting")
        assert clients[3].get(layout.CONTROLLER_EPOCH)[0] == b"2"
    finally:
        first.stop()
        second.stop()


def test_creation_requests_are_assigned_or_refused(clients):
    zk = clients[3]
    register(clients[1], 1)
    register(clients[2], 2)
    controller = KafkaController(clients[0], 1)
    try:
        controller.start()
        zk.create(layout.create_topic_request_path("orders"), layout.create_topic_request(4, 1, {"retention.ms": "5"}))
        wait_until(lambda: zk.exists(layout.topic_path("orders")), 10, message="the topic created")
        assignment = layout.parse_topic_assignment(zk.get(layout.topic_path("orders"))[0])
        assert sorted(r[0] for r in assignment.values()) == [1, 1, 2, 2]
        for p, replicas in assignment.items():
            assert state(zk, "orders", p)["leader"] == replicas[0]
        assert layout.decode(zk.get(layout.topic_config_path("orders"))[0])["config"] == {"retention.ms": "5"}
        assert zk.get_children(layout.ADMIN_CREATE_TOPICS) == []

        zk.create(layout.create_topic_request_path("wide"), layout.create_topic_request(1, 3, {}))
        refusal = wait_until(lambda: layout.decode(zk.get(layout.create_topic_request_path("wide"))[0])
                             .get("error_code"), 10, message="the refusal")
        assert refusal == ErrorCode.INVALID_REPLICATION_FACTOR
        assert zk.exists(layout.topic_path("wide")) is None

        zk.create(layout.delete_topic_request_path("orders"), b"")
        wait_until(lambda: zk.exists(layout.topic_path("orders")) is None, 10, message="the topic deleted")
        assert zk.exists(layout.topic_config_path("orders")) is None
        assert zk.get_children(layout.ADMIN_DELETE_TOPICS) == []
    finally:
        controller.stop()


def test_partitions_go_offline_with_their_broker_and_come_back_with_it(clients):
    zk = clients[3]
    register(clients[1], 1)
    register(clients[2], 2)
    controller = KafkaController(clients[0], 1)
    try:
        controller.start()
        zk.create(layout.create_topic_request_path("t"), layout.create_topic_request(2, 1, {}))
        wait_until(lambda: zk.exists(layout.partition_state_path("t", 1)), 10, message="the topic created")
        on_two = [p for p in (0, 1) if state(zk, "t", p)["leader"] == 2]
        clients[2].delete(layout.broker_path(2))
        wait_until(lambda: all(state(zk, "t", p)["leader"] == -1 for p in on_two), 10, message="offline")
        assert [state(zk, "t", p)["leader_epoch"] for p in on_two] == [1]
        register(clients[2], 2)
        wait_until(lambda: all(state(zk, "t", p)["leader"] == 2 for p in on_two), 10, message="back online")
        assert [(state(zk, "t", p)["leader_epoch"], state(zk, "t", p)["isr"]) for p in on_two] == [(2, [2])]
    finally:
        controller.stop()


def test_a_controller_whose_session_expires_resigns_and_another_takes_over(clients):
    first, second = KafkaController(clients[0], 1), KafkaController(clients[1], 2)
    try:
        first.start()
        wait_until(lambda: first.is_active, 10, message="broker 1 acting")
        second.start()
        expire_session(clients[0])
        wait_until(lambda: controller_of(clients[3]) in (1, 2) and (first.is_active != second.is_active), 20,
                   message="exactly one controller after the expiry")
        epoch = int(clients[3].get(layout.CONTROLLER_EPOCH)[0])
        assert epoch == 2
        active = first if first.is_active else second
        assert controller_of(clients[3]) == active.broker_id
    finally:
        first.stop()
        second.stop()


def test_the_cache_follows_brokers_topics_and_states(clients):
    zk = clients[3]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        changes: list[int] = []
        cache = ZkMetadataCache(clients[0], loop, on_change=lambda: changes.append(1))
        await loop.run_in_executor(None, cache.start)
        assert await cache.wait_for(lambda: cache.loaded, 5)
        assert cache.brokers == {} and cache.topics == {}
        await loop.run_in_executor(None, register, clients[1], 1)
        assert await cache.wait_for(lambda: 1 in cache.brokers, 5)
        assert (cache.brokers[1].host, cache.brokers[1].port) == ("127.0.0.1", 9001)

        def write_topic() -> None:
            zk.create(layout.topic_config_path("t"), layout.topic_config({"segment.bytes": "1000"}))
            txn = zk.transaction()
            txn.create(layout.topic_path("t"), layout.topic_assignment({0: [1], 1: [1]}))
            txn.create(layout.partitions_path("t"))
            for p in (0, 1):
                txn.create(f"{layout.partitions_path('t')}/{p}")
                txn.create(layout.partition_state_path("t", p), layout.partition_state(1, 0, [1], 1))
            txn.commit()
        await loop.run_in_executor(None, write_topic)
        assert await cache.wait_for(lambda: "t" in cache.topics and cache.topics["t"].complete, 5)
        topic = cache.topics["t"]
        assert topic.replicas == {0: [1], 1: [1]} and topic.configs == {"segment.bytes": "1000"}
        assert cache.partition_state("t", 1) == PartitionState(1, 0, (1,))
        assert cache.is_known("t", 1) and not cache.is_known("t", 2)

        await loop.run_in_executor(None, lambda: zk.set(layout.partition_state_path("t", 1),
                                                        layout.partition_state(-1, 1, [1], 1)))
        assert await cache.wait_for(lambda: cache.partition_state("t", 1).leader == -1, 5)
        await loop.run_in_executor(None, lambda: zk.delete(layout.topic_path("t"), recursive=True))
        assert await cache.wait_for(lambda: "t" not in cache.topics, 5)
        await loop.run_in_executor(None, clients[1].delete, layout.broker_path(1))
        assert await cache.wait_for(lambda: not cache.brokers, 5)
        assert changes

    asyncio.run(scenario())
