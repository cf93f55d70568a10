"""The controller and the metadata cache in-process against a real ZooKeeper, brokers stood in by znodes."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from broker.admin_manager import TopicError
from broker.cluster.admin import ZkAdminManager
from broker.cluster.controller import ControllerSettings, KafkaController, request_error
from broker.cluster.metadata_cache import CacheChanges, PartitionState, ZkMetadataCache
from pipeline.zk.client import BoundedZk
from broker.log.log_config import LogConfig
from pipeline.protocol.errors import ErrorCode
from pipeline.zk import layout
from pipeline.zk.client import connect
from tests.support import wait_until
from tests.support.zookeeper import expire_session


@pytest.fixture
def clients(zk_connect: str) -> Iterator[list[KazooClient]]:
    """Kazoo clients on the test's chroot (5 of them), with the persistent layout created."""
    opened = [connect(zk_connect, session_timeout_s=4) for _ in range(5)]
    for path in layout.PERSISTENT_PATHS:
        opened[0].ensure_path(path)
    yield opened
    for client in opened:
        client.stop()
        client.close()


def bounded(client: KazooClient) -> BoundedZk:
    return BoundedZk(client, timeout_s=10)


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
    first, second = KafkaController(bounded(clients[0]), 1), KafkaController(bounded(clients[1]), 2)
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
    controller = KafkaController(bounded(clients[0]), 1)
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


@contextmanager
def topic_over_two_brokers(clients: list[KazooClient]) -> Iterator[tuple[KafkaController, list[int]]]:
    """Brokers 1 and 2 registered, broker 1's controller running and topic "t" (2 partitions) created:
    the controller and the partitions broker 2 leads; the controller is stopped after the block."""
    zk = clients[3]
    register(clients[1], 1)
    register(clients[2], 2)
    controller = KafkaController(bounded(clients[0]), 1)
    try:
        controller.start()
        zk.create(layout.create_topic_request_path("t"), layout.create_topic_request(2, 1, {}))
        wait_until(lambda: zk.exists(layout.partition_state_path("t", 1)), 10, message="the topic created")
        yield controller, [p for p in (0, 1) if state(zk, "t", p)["leader"] == 2]
    finally:
        controller.stop()


def test_partitions_go_offline_with_their_broker_and_come_back_with_it(clients):
    zk = clients[3]
    with topic_over_two_brokers(clients) as (_, on_two):
        clients[2].delete(layout.broker_path(2))
        wait_until(lambda: all(state(zk, "t", p)["leader"] == -1 for p in on_two), 10, message="offline")
        assert [state(zk, "t", p)["leader_epoch"] for p in on_two] == [1]
        register(clients[2], 2)
        wait_until(lambda: all(state(zk, "t", p)["leader"] == 2 for p in on_two), 10, message="back online")
        assert [(state(zk, "t", p)["leader_epoch"], state(zk, "t", p)["isr"]) for p in on_two] == [(2, [2])]


def test_a_controller_whose_session_expires_resigns_and_another_takes_over(clients):
    first, second = KafkaController(bounded(clients[0]), 1), KafkaController(bounded(clients[1]), 2)
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
        changes: list[CacheChanges] = []
        cache = ZkMetadataCache(bounded(clients[0]), loop, on_change=changes.append)
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


def refusal_of(zk: KazooClient, topic: str) -> tuple[int, str] | None:
    data = zk.get(layout.create_topic_request_path(topic))[0]
    value = layout.decode(data)
    return (value["error_code"], value["error_message"]) if "error_code" in value else None


def test_creations_too_big_for_one_transaction_are_refused_and_others_go_on(clients):
    zk = clients[3]
    register(clients[1], 1)
    controller = KafkaController(bounded(clients[0]), 1)
    try:
        controller.start()
        # Too many partitions: refused from the estimate, before anything is built.
        zk.create(layout.create_topic_request_path("huge"), layout.create_topic_request(1_000_000, 1, {}))
        # Few partitions, but with configs the transaction passes ZooKeeper's limit.
        zk.create(layout.create_topic_request_path("heavy"),
                  layout.create_topic_request(1500, 1, {"x": "y" * 700_000}))
        zk.create(layout.create_topic_request_path("normal"), layout.create_topic_request(2, 1, {}))
        huge = wait_until(lambda: refusal_of(zk, "huge"), 20, message="the refusal of 'huge'")
        heavy = wait_until(lambda: refusal_of(zk, "heavy"), 20, message="the refusal of 'heavy'")
        assert huge[0] == ErrorCode.INVALID_PARTITIONS and "transaction" in huge[1]
        assert heavy[0] == ErrorCode.INVALID_REQUEST and "limit" in heavy[1]
        wait_until(lambda: zk.exists(layout.partition_state_path("normal", 1)), 10, message="'normal' created")
        assert zk.exists(layout.topic_path("huge")) is None and zk.exists(layout.topic_path("heavy")) is None
    finally:
        controller.stop()


def test_a_creation_that_failed_is_retried_without_another_change(clients, caplog):
    zk = clients[3]
    register(clients[1], 1)
    controller = KafkaController(bounded(clients[0]), 1)
    # The controller cannot write topic configs for now: every creation fails in ZooKeeper (NoAuth).
    zk.set_acls(layout.CONFIG_TOPICS, [make_acl("world", "anyone", read=True, write=True, delete=True, admin=True)])
    try:
        controller.start()
        wait_until(lambda: controller.is_active, 10, message="the controller elected")
        zk.create(layout.create_topic_request_path("later"), layout.create_topic_request(1, 1, {}))
        wait_until(lambda: "create failed" in caplog.text, 10, message="a failed creation")
        assert zk.exists(layout.topic_path("later")) is None
        zk.set_acls(layout.CONFIG_TOPICS, OPEN_ACL_UNSAFE)
        # No further change in ZooKeeper: the controller's own retry creates it.
        wait_until(lambda: zk.exists(layout.partition_state_path("later", 0)), 15, message="'later' created")
        assert zk.get_children(layout.ADMIN_CREATE_TOPICS) == []
    finally:
        zk.set_acls(layout.CONFIG_TOPICS, OPEN_ACL_UNSAFE)
        controller.stop()


def test_a_controller_fenced_by_a_newer_epoch_writes_nothing(clients):
    zk = clients[3]
    with topic_over_two_brokers(clients) as (controller, on_two):
        before = {p: state(zk, "t", p) for p in on_two}
        # A successor was elected (the epoch moved on) while this controller still believes it leads,
        # as after a session loss it has not noticed yet.
        data, stat = zk.get(layout.CONTROLLER_EPOCH)
        zk.set(layout.CONTROLLER_EPOCH, str(int(data) + 1).encode(), version=stat.version)
        clients[2].delete(layout.broker_path(2))
        wait_until(lambda: not controller.is_active, 10, message="the fenced controller resigning")
        assert {p: state(zk, "t", p) for p in on_two} == before


def test_requests_that_time_out_or_were_refused_do_not_keep_a_name_being_created(clients):
    zk = clients[3]
    register(clients[1], 1)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        cache = ZkMetadataCache(bounded(clients[0]), loop)
        await loop.run_in_executor(None, cache.start)
        assert await cache.wait_for(lambda: cache.loaded and 1 in cache.brokers, 5)
        admin = ZkAdminManager(bounded(clients[0]), cache, LogConfig(), 1, 1)
        # No controller runs: the creation times out, and its request is withdrawn.
        with pytest.raises(TopicError) as timed_out:
            await admin.create_topic("slow", 1, 1, timeout_ms=300)
        assert timed_out.value.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert zk.exists(layout.create_topic_request_path("slow")) is None
        # A refusal whose requester went away: a new request for the name replaces it.
        zk.create(layout.create_topic_request_path("left"),
                  request_error(ErrorCode.INVALID_REPLICATION_FACTOR, "refused long ago"))
        controller = KafkaController(bounded(clients[2]), 1)
        controller.start()
        try:
            await admin.create_topic("left", 1, 1, timeout_ms=10000)
        finally:
            controller.stop()
        assert "left" in cache.topics

    asyncio.run(scenario())


def test_the_cache_follows_partition_states_across_a_session_expiry(clients):
    zk = clients[3]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        cache = ZkMetadataCache(bounded(clients[0]), loop)
        await loop.run_in_executor(None, cache.start)
        zk.create(layout.topic_path("t"), layout.topic_assignment({0: [1]}))
        zk.create(layout.partition_state_path("t", 0), layout.partition_state(1, 0, [1], 1), makepath=True)
        assert await cache.wait_for(lambda: cache.partition_state("t", 0) == PartitionState(1, 0, (1,)), 5)
        # The server forgets the session's watches; the cache must set them again on its new session.
        await loop.run_in_executor(None, expire_session, clients[0])
        await loop.run_in_executor(None, wait_until, lambda: clients[0].connected, 10)
        for epoch in (1, 2):
            zk.set(layout.partition_state_path("t", 0), layout.partition_state(-1, epoch, [1], 1))
            assert await cache.wait_for(lambda: cache.partition_state("t", 0) == PartitionState(-1, epoch, (1,)), 5)

    asyncio.run(scenario())


# -- replication: three brokers (clients 1, 2 and 4), the controller on client 0, client 3 observes -----------

BROKER_CLIENTS = {1: 1, 2: 2, 3: 4}


@contextmanager
def replicated_topic(clients: list[KazooClient], settings: ControllerSettings | None = None,
                     replicas: dict[int, list[int]] | None = None) -> Iterator[KafkaController]:
    """Brokers 1, 2, 3 registered, a controller (broker 1's, ``settings``) running and topic "r" created with
    the replica lists ``replicas`` (default: one partition on [1, 2, 3]), as the controller starts a topic's
    partitions added to its assignment."""
    zk = clients[3]
    for broker, client in BROKER_CLIENTS.items():
        register(clients[client], broker)
    replicas = replicas or {0: [1, 2, 3]}
    controller = KafkaController(bounded(clients[0]), 1, settings or ControllerSettings(auto_leader_rebalance=False))
    try:
        controller.start()
        wait_until(lambda: controller.is_active, 10, message="the controller elected")
        zk.create(layout.topic_path("r"), layout.topic_assignment(replicas, topic_id="r-id"))
        zk.create(layout.partitions_path("r"))
        wait_until(lambda: all(zk.exists(layout.partition_state_path("r", p)) for p in replicas), 10,
                   message="the partitions started")
        yield controller
    finally:
        controller.stop()


def stop_broker(clients: list[KazooClient], broker: int) -> None:
    clients[BROKER_CLIENTS[broker]].delete(layout.broker_path(broker))


def leader_sets_isr(zk: KazooClient, topic: str, partition: int, isr: list[int]) -> None:
    """What a leader does when its ISR changes: a conditional write of the state, then a notification."""
    data, stat = zk.get(layout.partition_state_path(topic, partition))
    value = layout.decode(data)
    zk.set(layout.partition_state_path(topic, partition),
           layout.partition_state(value["leader"], value["leader_epoch"], isr, value["controller_epoch"]),
           version=stat.version)
    zk.create(layout.ISR_CHANGE_PREFIX, layout.partition_list([(topic, partition)]), sequence=True)


def leadership(zk: KazooClient, topic: str = "r", partition: int = 0) -> tuple[int, int, list[int]]:
    value = state(zk, topic, partition)
    return value["leader"], value["leader_epoch"], value["isr"]


def test_partitions_start_fully_in_sync_and_leaders_are_elected_from_the_isr(clients):
    zk = clients[3]
    with replicated_topic(clients) as controller:
        assert leadership(zk) == (1, 0, [1, 2, 3])
        zk.create(layout.create_topic_request_path("c"), layout.create_topic_request(3, 3, {}))
        wait_until(lambda: zk.exists(layout.partition_state_path("c", 2)), 10, message="'c' created")
        for p, replicas in layout.parse_topic_assignment(zk.get(layout.topic_path("c"))[0]).items():
            assert leadership(zk, "c", p) == (replicas[0], 0, replicas)
        stop_broker(clients, 3)
        # A follower that dies leaves the ISR; the leader and its epoch stay.
        wait_until(lambda: leadership(zk) == (1, 0, [1, 2]), 10, message="3 out of the ISR")
        stop_broker(clients, 1)
        wait_until(lambda: leadership(zk) == (2, 1, [2]), 10, message="2 elected")
        assert controller.offline_partition_count == 0


def test_a_broker_registered_anew_since_the_controller_looked_is_failed_over_then_counted_back(clients):
    zk = clients[3]
    with replicated_topic(clients):
        assert leadership(zk) == (1, 0, [1, 2, 3])
        # Broker 1 restarts between two looks of the controller: its old registration goes and the new one
        # comes in one step, as a broker restarted at once registers the moment its old session's node goes.
        transaction = clients[BROKER_CLIENTS[1]].transaction()
        transaction.delete(layout.broker_path(1))
        transaction.create(layout.broker_path(1), layout.broker_registration("127.0.0.1", 9001), ephemeral=True)
        assert not any(isinstance(result, Exception) for result in transaction.commit())
        wait_until(lambda: leadership(zk) == (2, 1, [2, 3]), 10, message="broker 1 failed over")
        assert sorted(zk.get_children(layout.BROKER_IDS)) == ["1", "2", "3"]


def test_with_no_live_isr_member_the_partition_stays_offline_until_one_returns(clients):
    zk = clients[3]
    with replicated_topic(clients) as controller:
        leader_sets_isr(zk, "r", 0, [1])
        wait_until(lambda: zk.get_children(layout.ISR_CHANGE_NOTIFICATION) == [], 10,
                   message="the notification handled")
        stop_broker(clients, 1)
        wait_until(lambda: leadership(zk) == (-1, 1, [1]), 10, message="offline")
        wait_until(lambda: controller.offline_partition_count == 1, 5, message="counted offline")
        register(clients[1], 1)
        wait_until(lambda: leadership(zk) == (1, 2, [1]), 10, message="its last ISR member back")
        wait_until(lambda: controller.offline_partition_count == 0, 5, message="counted online")


def test_unclean_leader_election_elects_a_replica_outside_the_isr(clients):
    zk = clients[3]
    with replicated_topic(clients, ControllerSettings(unclean_leader_election=True, auto_leader_rebalance=False)):
        leader_sets_isr(zk, "r", 0, [1])
        wait_until(lambda: zk.get_children(layout.ISR_CHANGE_NOTIFICATION) == [], 10,
                   message="the notification handled")
        stop_broker(clients, 1)
        wait_until(lambda: leadership(zk) == (2, 1, [2]), 10, message="2 elected uncleanly")


def test_controlled_shutdown_moves_leadership_away_and_reports_what_it_could_not(clients):
    zk = clients[3]
    with replicated_topic(clients, replicas={0: [1, 2, 3], 1: [1, 2]}):
        leader_sets_isr(zk, "r", 1, [1])
        wait_until(lambda: zk.get_children(layout.ISR_CHANGE_NOTIFICATION) == [], 10,
                   message="the notification handled")
        shutdown = layout.controlled_shutdown_path(1)
        clients[1].create(shutdown, b"", ephemeral=True)
        wait_until(lambda: layout.parse_controlled_shutdown_reply(zk.get(shutdown)[0]) is not None, 10,
                   message="the controller's answer")
        assert layout.parse_controlled_shutdown_reply(zk.get(shutdown)[0]) == 1
        assert leadership(zk, "r", 0) == (2, 1, [2, 3])
        assert leadership(zk, "r", 1) == (1, 0, [1])
        # It is not elected while it shuts down.
        stop_broker(clients, 2)
        wait_until(lambda: leadership(zk, "r", 0) == (3, 2, [3]), 10, message="3 elected, not 1")


def test_preferred_replica_election_puts_leadership_back(clients):
    zk = clients[3]
    with replicated_topic(clients) as controller:
        stop_broker(clients, 1)
        wait_until(lambda: leadership(zk) == (2, 1, [2, 3]), 10, message="2 elected")
        register(clients[1], 1)
        leader_sets_isr(zk, "r", 0, [2, 3, 1])
        wait_until(lambda: controller.preferred_replica_imbalance_count == 1, 10, message="counted imbalanced")
        zk.create(layout.ADMIN_PREFERRED_REPLICA_ELECTION, layout.partition_list([("r", 0)]))
        wait_until(lambda: leadership(zk) == (1, 2, [2, 3, 1]), 10, message="1 leading again")
        wait_until(lambda: zk.exists(layout.ADMIN_PREFERRED_REPLICA_ELECTION) is None, 10,
                   message="the request removed")
        wait_until(lambda: controller.preferred_replica_imbalance_count == 0, 5, message="counted balanced")


def test_automatic_rebalance_elects_preferred_replicas_of_imbalanced_brokers(clients):
    zk = clients[3]
    settings = ControllerSettings(auto_leader_rebalance=True, imbalance_check_interval_s=0.5)
    with replicated_topic(clients, settings):
        stop_broker(clients, 1)
        wait_until(lambda: leadership(zk) == (2, 1, [2, 3]), 10, message="2 elected")
        register(clients[1], 1)
        leader_sets_isr(zk, "r", 0, [2, 3, 1])
        wait_until(lambda: leadership(zk) == (1, 2, [2, 3, 1]), 10, message="1 leading again")


def test_a_reassignment_adds_replicas_waits_for_them_in_sync_then_drops_the_old_ones(clients):
    zk = clients[3]
    with replicated_topic(clients, replicas={0: [1], 1: [2]}):
        zk.create(layout.ADMIN_REASSIGN_PARTITIONS, layout.reassignment_request({("r", 0): [3, 2]}))

        def assignment() -> dict[int, list[int]]:
            return layout.parse_topic_assignment(zk.get(layout.topic_path("r"))[0])
        wait_until(lambda: assignment() == {0: [3, 2, 1], 1: [2]}, 10, message="the new replicas added")
        assert leadership(zk) == (1, 0, [1])
        # One new replica catches up, the other dies: the reassignment waits for it.
        stop_broker(clients, 3)
        leader_sets_isr(zk, "r", 0, [1, 2])
        wait_until(lambda: zk.get_children(layout.ISR_CHANGE_NOTIFICATION) == [], 10, message="the ISR change read")
        # The controller's events run in order: once this election is done, so is the reassignment's pass.
        zk.create(layout.ADMIN_PREFERRED_REPLICA_ELECTION, layout.partition_list([("r", 1)]))
        wait_until(lambda: zk.exists(layout.ADMIN_PREFERRED_REPLICA_ELECTION) is None, 10, message="the election")
        assert zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) and assignment() == {0: [3, 2, 1], 1: [2]}
        register(clients[BROKER_CLIENTS[3]], 3)
        # It caught up: the leader (1) adds it to the ISR.
        leader_sets_isr(zk, "r", 0, [1, 2, 3])
        wait_until(lambda: assignment() == {0: [3, 2], 1: [2]}, 10, message="the old replica dropped")
        assert leadership(zk) == (3, 1, [2, 3])
        wait_until(lambda: zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) is None, 10, message="the request removed")
        assert layout.parse_topic_id(zk.get(layout.topic_path("r"))[0]) == "r-id"


def test_malformed_requests_and_notifications_are_removed_and_the_next_ones_carried_out(clients):
    zk = clients[3]
    with replicated_topic(clients, replicas={0: [1, 2, 3], 1: [1, 2]}):
        zk.create(layout.ISR_CHANGE_PREFIX, b"{not json", sequence=True)
        zk.create(layout.ADMIN_PREFERRED_REPLICA_ELECTION, b'["r", 0]')
        zk.create(layout.ADMIN_REASSIGN_PARTITIONS, b'{"version":1,"partitions":[{"topic":"r","partition":0}]}')
        wait_until(lambda: zk.get_children(layout.ISR_CHANGE_NOTIFICATION) == []
                   and zk.exists(layout.ADMIN_PREFERRED_REPLICA_ELECTION) is None
                   and zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) is None, 10, message="the malformed ones removed")
        zk.create(layout.ADMIN_REASSIGN_PARTITIONS, layout.reassignment_request({("r", 1): [1]}))
        wait_until(lambda: zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) is None, 10, message="a valid one carried out")
        assert layout.parse_topic_assignment(zk.get(layout.topic_path("r"))[0])[1] == [1]
        assert leadership(zk, "r", 1) == (1, 0, [1])


def test_a_new_controller_carries_on_a_reassignment_its_predecessor_started(clients):
    zk = clients[3]
    with replicated_topic(clients, replicas={0: [1]}) as first:
        zk.create(layout.ADMIN_REASSIGN_PARTITIONS, layout.reassignment_request({("r", 0): [2]}))
        wait_until(lambda: layout.parse_topic_assignment(zk.get(layout.topic_path("r"))[0]) == {0: [2, 1]}, 10,
                   message="2 added")
        first.stop()
        clients[0].stop()
        successor = KafkaController(bounded(zk), 2, ControllerSettings(auto_leader_rebalance=False))
        try:
            successor.start()
            wait_until(lambda: successor.is_active, 10, message="the successor elected")
            leader_sets_isr(zk, "r", 0, [1, 2])
            wait_until(lambda: zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) is None, 10, message="the reassignment done")
            assert layout.parse_topic_assignment(zk.get(layout.topic_path("r"))[0]) == {0: [2]}
            assert leadership(zk) == (2, 1, [2])
        finally:
            successor.stop()
