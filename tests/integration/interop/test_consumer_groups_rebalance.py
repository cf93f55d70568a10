"""Rebalance protocols and fencing against a standalone broker's group coordinator: confluent-kafka's
cooperative-sticky members give up only what moves, a static member (group.instance.id) restarted within its
session timeout gets its partitions back without the others rebalancing, a zombie member cannot commit with an
old generation or an unknown member id, and librdkafka still compresses with LZ4 now that FindCoordinator
names a coordinator."""

from __future__ import annotations

import time

import pytest

from tests.support import group_wire, wire
from tests.support.clients import create_topic
from tests.support.polling import wait_until
from tests.support.segments import stored_batches
from tests.support.stock_group_member import GroupMember
from tests.support.stock_groups import coordinator_of, produce_batch, wait_consumed, wait_shared

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 12
LZ4 = 3


def test_cooperative_sticky_second_member_takes_only_what_moves(group_broker, group_members, tmp_path):
    bootstrap = group_broker.bootstrap
    topic, group = "groups-cooperative", "group-cooperative"
    create_topic(bootstrap, topic, PARTITIONS)

    def member(name: str) -> GroupMember:
        started = GroupMember(tmp_path / f"{name}.log", "confluent", bootstrap, group, topic,
                              assignor="cooperative-sticky").start()
        group_members.append(started)
        return started

    first = member("first")
    wait_shared([first], PARTITIONS)
    second = member("second")
    kept, moved = wait_shared([first, second], PARTITIONS)
    assert len(kept) == len(moved) == PARTITIONS // 2, (kept, moved)

    # Incremental callbacks: the first member was handed everything once and afterwards only gave up the
    # partitions that moved; it never revoked (and re-got) what it kept, as an eager rebalance would.
    # (librdkafka also calls back with empty incremental assignments after each cooperative round.)
    events = [(kind, partitions) for kind, partitions in first.read().events if partitions]
    assert events[0] == ("ASSIGN", frozenset(range(PARTITIONS))), events
    assert all(kind == "REVOKE" and partitions <= moved for kind, partitions in events[1:]), events
    assert frozenset().union(*(partitions for _, partitions in events[1:])) == moved, events
    assert all(kind == "ASSIGN" for kind, _ in second.read().events), second.read().events

    values = produce_batch(bootstrap, topic, "cooperative", 24, PARTITIONS)
    wait_consumed([first, second], values)


def assert_stays(condition, seconds: float, message: str) -> None:
    """Poll ``condition`` for ``seconds``; fail as soon as it does not hold."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert condition(), message
        time.sleep(0.1)


# (client, which member restarts: the group's leader (the first to join) or a follower)
STATIC_RESTARTS = [
    # Kafka answers a restarted leader without a rebalance too: it names the old member id as the leader, so
    # the new one assigns nothing and takes its old assignment from SyncGroup.
    pytest.param("confluent", "leader", id="confluent-leader"),
    pytest.param("kafka-python", "follower", id="kafka-python-follower"),
]


@pytest.mark.parametrize("client,restarting", STATIC_RESTARTS)
def test_static_member_restarted_within_session_timeout_gets_its_partitions_back(group_broker, group_members,
                                                                                 tmp_path, client, restarting):
    bootstrap = group_broker.bootstrap
    topic, group, session_ms = f"groups-static-{client}", f"group-static-{client}", 4000
    create_topic(bootstrap, topic, PARTITIONS)

    def member(name: str, instance: str) -> GroupMember:
        started = GroupMember(tmp_path / f"{name}.log", client, bootstrap, group, topic,
                              session_timeout_ms=session_ms, instance_id=instance).start()
        group_members.append(started)
        return started

    leader = member("leader", "instance-a")
    wait_shared([leader], PARTITIONS)
    follower = member("follower", "instance-b")
    before = dict(zip(("leader", "follower"), wait_shared([leader, follower], PARTITIONS)))
    static, other = (leader, follower) if restarting == "leader" else (follower, leader)
    other_events = other.read().events
    static.kill()
    killed_at = time.monotonic()
    restarted = member("restarted", "instance-a" if restarting == "leader" else "instance-b")
    # The restarted instance is given its old partitions (by the coordinator, from the last assignment).
    assert wait_shared([restarted, other], PARTITIONS) == [before[restarting], frozenset(other.read().owned or ())]
    assert restarted.read().owned == before[restarting]
    assert time.monotonic() - killed_at < session_ms / 1000, "restart took longer than the session timeout"
    # ... and the other member saw no rebalance, then nor after the old instance's session would have ended.
    assert other.read().events == other_events
    assert_stays(lambda: other.read().events == other_events, killed_at + session_ms / 1000 + 1 - time.monotonic(),
                 "the other member was rebalanced after the static member's restart")
    values = produce_batch(bootstrap, topic, "static", 24, PARTITIONS)
    wait_consumed([restarted, other], values)


def test_static_members_back_under_new_ids_keep_generation_and_assignment(group_broker):
    """Raw JoinGroup v5: static members that come back as new processes (a new member id, other user data in
    their subscription) get the same generation and their old assignments, and the others are not asked to
    rebalance -- the leader included, whose answer names the old leader id so that it assigns nothing."""
    topic, group = "groups-static-raw", "group-static-raw"
    create_topic(group_broker.bootstrap, topic, 2)
    coordinator = coordinator_of(group_broker.bootstrap, group)
    connections = [wire.KafkaConnection(coordinator.host, coordinator.port) for _ in range(4)]
    a, b, new_b, new_a = connections
    timeouts = {"session_timeout_ms": 10000, "rebalance_timeout_ms": 3000}
    try:
        first = group_wire.join_group(a, group, "", [topic], instance_id="a", user_data=b"a-1", **timeouts)
        leader_id = first.member_id
        sync = group_wire.send_sync_group(a, group, first.generation_id, leader_id,
                                          {leader_id: group_wire.assignment({topic: [0, 1]})})
        assert group_wire.receive_sync_group(a, sync)[0] == group_wire.NONE
        joining = group_wire.send_join_group(b, group, "", [topic], instance_id="b", user_data=b"b-1", **timeouts)
        wait_until(lambda: group_wire.heartbeat(a, group, first.generation_id, leader_id)
                   == group_wire.REBALANCE_IN_PROGRESS, 10, message="a rebalance for the second member")
        rejoin = group_wire.join_group(a, group, leader_id, [topic], instance_id="a", user_data=b"a-1", **timeouts)
        second = group_wire.receive_join_group(b, joining)
        generation = rejoin.generation_id
        assert (rejoin.leader, second.generation_id) == (leader_id, generation), (rejoin, second)
        follower_sync = group_wire.send_sync_group(b, group, generation, second.member_id)
        leader_sync = group_wire.send_sync_group(a, group, generation, leader_id, {
            leader_id: group_wire.assignment({topic: [0]}), second.member_id: group_wire.assignment({topic: [1]})})
        assert group_wire.receive_sync_group(a, leader_sync) == (group_wire.NONE, group_wire.assignment({topic: [0]}))
        assert group_wire.receive_sync_group(b, follower_sync) == (group_wire.NONE,
                                                                   group_wire.assignment({topic: [1]}))

        def come_back(conn: wire.KafkaConnection, instance: str, old_id: str, partition: int) -> str:
            """Join as a new process of ``instance`` and sync; return the new member id."""
            back = group_wire.join_group(conn, group, "", [topic], instance_id=instance,
                                         user_data=f"{instance}-2".encode(), **timeouts)
            assert (back.error_code, back.generation_id) == (group_wire.NONE, generation), back
            assert back.member_id != old_id and back.leader == leader_id and back.members == {}, back
            sync = group_wire.send_sync_group(conn, group, generation, back.member_id)
            assert group_wire.receive_sync_group(conn, sync) == (group_wire.NONE,
                                                                 group_wire.assignment({topic: [partition]}))
            return back.member_id

        new_b_id = come_back(new_b, "b", second.member_id, 1)
        assert group_wire.heartbeat(a, group, generation, leader_id) == group_wire.NONE
        come_back(new_a, "a", leader_id, 0)
        assert group_wire.heartbeat(new_b, group, generation, new_b_id) == group_wire.NONE
    finally:
        for conn in connections:
            conn.close()


def test_zombie_member_cannot_commit(group_broker):
    topic, group = "groups-fencing", "group-fencing"
    create_topic(group_broker.bootstrap, topic, 2)
    coordinator = coordinator_of(group_broker.bootstrap, group)
    with wire.KafkaConnection(coordinator.host, coordinator.port) as a, \
            wire.KafkaConnection(coordinator.host, coordinator.port) as b:
        first = group_wire.join_group(a, group, "", [topic], session_timeout_ms=10000)
        assert first.error_code == group_wire.NONE and first.leader == first.member_id, first
        member, old_generation = first.member_id, first.generation_id
        sync = group_wire.send_sync_group(a, group, old_generation, member,
                                          {member: group_wire.assignment({topic: [0, 1]})})
        assert group_wire.receive_sync_group(a, sync)[0] == group_wire.NONE
        assert group_wire.offset_commit(a, group, old_generation, member, topic, {0: 5}) == {0: group_wire.NONE}

        # A second member joins: the first must rejoin, and the group moves to the next generation.
        joining = group_wire.send_join_group(b, group, "", [topic], session_timeout_ms=10000)
        wait_until(lambda: group_wire.heartbeat(a, group, old_generation, member) == group_wire.REBALANCE_IN_PROGRESS,
                   10, message="the coordinator answering heartbeats with REBALANCE_IN_PROGRESS")
        rejoin = group_wire.join_group(a, group, member, [topic], session_timeout_ms=10000)
        second = group_wire.receive_join_group(b, joining)
        assert rejoin.error_code == second.error_code == group_wire.NONE, (rejoin, second)
        generation = rejoin.generation_id
        assert generation == second.generation_id == old_generation + 1
        leader_conn, follower_conn = (a, b) if rejoin.leader == member else (b, a)
        follower_sync = group_wire.send_sync_group(follower_conn, group, generation,
                                                   second.member_id if follower_conn is b else member)
        leader_sync = group_wire.send_sync_group(leader_conn, group, generation, rejoin.leader, {
            member: group_wire.assignment({topic: [0]}), second.member_id: group_wire.assignment({topic: [1]})})
        assert group_wire.receive_sync_group(leader_conn, leader_sync)[0] == group_wire.NONE
        assert group_wire.receive_sync_group(follower_conn, follower_sync)[0] == group_wire.NONE

        # The old generation and an unknown member id are refused; the committed offset stays.
        assert group_wire.offset_commit(a, group, old_generation, member, topic, {0: 99}) == {
            0: group_wire.ILLEGAL_GENERATION}
        assert group_wire.offset_commit(a, group, generation, "zombie-0", topic, {0: 99}) == {
            0: group_wire.UNKNOWN_MEMBER_ID}
        assert group_wire.offset_fetch(a, group, topic, [0]) == {0: (5, group_wire.NONE)}
        # A member that left is unknown from then on.
        assert group_wire.leave_group(b, group, second.member_id) == group_wire.NONE
        assert group_wire.offset_commit(b, group, generation, second.member_id, topic, {1: 99}) == {
            1: group_wire.UNKNOWN_MEMBER_ID}
        # The current generation commits (so the refusals above are the fencing, not a broken commit).
        assert group_wire.offset_commit(a, group, generation, member, topic, {0: 7}) == {0: group_wire.NONE}
        assert group_wire.offset_fetch(a, group, topic, [0, 1]) == {0: (7, group_wire.NONE),
                                                                    1: (-1, group_wire.NONE)}
        assert group_wire.leave_group(a, group, member) == group_wire.NONE


def test_librdkafka_sends_lz4_batches_compressed_to_a_coordinating_broker(group_broker):
    topic = "groups-lz4"
    create_topic(group_broker.bootstrap, topic, 1)
    assert coordinator_of(group_broker.bootstrap, "group-lz4").error_code == group_wire.NONE
    produce_batch(group_broker.bootstrap, topic, "compressible text " * 20, 200, 1, **{"compression.type": "lz4"})
    codecs = [batch.compression for batch in stored_batches(group_broker.partition_dir(topic, 0))]
    assert codecs and set(codecs) == {LZ4}, codecs
