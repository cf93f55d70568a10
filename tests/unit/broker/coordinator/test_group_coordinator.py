"""GroupCoordinator's protocol rules on a real event loop with the standalone file store (short real timeouts)."""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator.coordinator_placement import coordinator_for
from broker.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from broker.coordinator.group_store import FileGroupStore
from pipeline.protocol.errors import ErrorCode

SESSION_MS = 300
PROTOCOLS = [("range", b"sub-range"), ("roundrobin", b"sub-rr")]


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def make(tmp_path, clock=None, **settings) -> GroupCoordinator:
    config = GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=50, **settings)
    return GroupCoordinator(FileGroupStore(tmp_path), config, clock_ms=clock or Clock())


async def join(coordinator, member_id="", group="g", instance=None, protocols=PROTOCOLS, session_ms=SESSION_MS):
    answer = await coordinator.join_group(group, member_id, instance, "client", "/127.0.0.1", session_ms, session_ms,
                                          "consumer", protocols, require_known_member_id=instance is None)
    if answer["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
        answer = await coordinator.join_group(group, answer["member_id"], instance, "client", "/127.0.0.1",
                                              session_ms, session_ms, "consumer", protocols, True)
    return answer


async def stable_pair(coordinator, instances=(None, None)):
    """Two members in generation 1 with assignments a and b: (leader answer, follower answer), each with the
    instance id it joined with under "instance"."""
    answers = await asyncio.gather(*(join(coordinator, instance=i) for i in instances))
    for answer, instance in zip(answers, instances):
        answer["instance"] = instance
    leader, follower = answers if answers[0]["leader"] == answers[0]["member_id"] else answers[::-1]
    assignments = {leader["member_id"]: b"a", follower["member_id"]: b"b"}
    synced = await asyncio.gather(
        coordinator.sync_group("g", 1, leader["member_id"], leader["instance"], assignments),
        coordinator.sync_group("g", 1, follower["member_id"], follower["instance"], {}))
    assert [s["assignment"] for s in synced] == [b"a", b"b"]
    return leader, follower


def test_members_join_one_generation_and_get_the_leaders_assignment(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator)
        assert leader["generation_id"] == follower["generation_id"] == 1
        assert leader["protocol_name"] == "range"
        assert sorted(m["member_id"] for m in leader["members"]) == sorted([leader["member_id"], follower["member_id"]])
        assert {m["metadata"] for m in leader["members"]} == {b"sub-range"}
        assert follower["members"] == []
        described = await coordinator.describe_group("g")
        assert described["group_state"] == "Stable"
        assert sorted(m["member_assignment"] for m in described["members"]) == [b"a", b"b"]
        assert await coordinator.heartbeat("g", 1, follower["member_id"], None) == ErrorCode.NONE
    asyncio.run(scenario())


def test_a_silent_member_is_removed_after_its_session_and_the_others_rebalance(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator)
        deadline = asyncio.get_running_loop().time() + 5
        # Only the leader heartbeats: the follower's session runs out and a rebalance begins.
        while True:
            code = await coordinator.heartbeat("g", 1, leader["member_id"], None)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                break
            assert code == ErrorCode.NONE and asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(SESSION_MS / 4000)
        rejoined = await join(coordinator, leader["member_id"])
        assert rejoined["generation_id"] == 2
        assert [m["member_id"] for m in rejoined["members"]] == [leader["member_id"]]
        assert await coordinator.heartbeat("g", 2, follower["member_id"], None) == ErrorCode.UNKNOWN_MEMBER_ID
        assert coordinator.metrics.expired_members == 1
    asyncio.run(scenario())


def test_a_zombie_of_an_old_generation_cannot_commit(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator)
        ok = await coordinator.commit_offsets("g", 1, follower["member_id"], None, {("t", 0): (5, "")})
        assert ok == {("t", 0): ErrorCode.NONE}
        # The leader rejoins with new metadata: generation 2 is formed without the follower's old generation.
        rejoin_leader = asyncio.ensure_future(join(coordinator, leader["member_id"], protocols=[("range", b"new")]))
        rejoin_follower = asyncio.ensure_future(join(coordinator, follower["member_id"]))
        rejoined = await asyncio.gather(rejoin_leader, rejoin_follower)
        assert {r["generation_id"] for r in rejoined} == {2}
        await asyncio.gather(*(coordinator.sync_group("g", 2, r["member_id"], None, {}) for r in rejoined))
        zombie = await coordinator.commit_offsets("g", 1, follower["member_id"], None, {("t", 0): (99, "")})
        assert zombie == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
        stranger = await coordinator.commit_offsets("g", 2, "not-a-member", None, {("t", 0): (99, "")})
        assert stranger == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        code, offsets = await coordinator.fetch_offsets("g", [("t", 0)])
        assert code == ErrorCode.NONE and offsets[("t", 0)].offset == 5
    asyncio.run(scenario())


def test_a_static_member_back_under_a_new_id_keeps_its_assignment_without_a_rebalance(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator, instances=("host-1", "host-2"))
        # The follower restarts: a JoinGroup with no member id but its instance id.
        back = await join(coordinator, instance=follower["instance"])
        assert back["generation_id"] == 1 and back["member_id"] != follower["member_id"]
        synced = await coordinator.sync_group("g", 1, back["member_id"], follower["instance"], {})
        assert synced["assignment"] == b"b"
        assert await coordinator.heartbeat("g", 1, follower["member_id"], follower["instance"]) == \
            ErrorCode.FENCED_INSTANCE_ID
        assert await coordinator.heartbeat("g", 1, leader["member_id"], leader["instance"]) == ErrorCode.NONE
        assert (await coordinator.describe_group("g"))["group_state"] == "Stable"
    asyncio.run(scenario())


def test_simple_commits_metadata_limits_and_a_restart_of_the_store(tmp_path):
    async def scenario():
        coordinator = make(tmp_path, offset_metadata_max_bytes=8)
        results = await coordinator.commit_offsets("solo", -1, "", None, {("t", 0): (3, "ok"), ("t", 1): (4, "x" * 9)})
        assert results == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
        coordinator.store.close()
        # A torn last line (a crash mid-write) is dropped at the next start-up.
        with open(tmp_path / FileGroupStore.FILE_NAME, "ab") as file:
            file.write(b'{"type":"offset","group":"solo"')
        reopened = make(tmp_path)
        code, offsets = await reopened.fetch_offsets("solo", None)
        assert code == ErrorCode.NONE
        assert {tp: (c.offset, c.metadata) for tp, c in offsets.items()} == {("t", 0): (3, "ok")}
        listed = await reopened.list_groups()
        assert listed == (ErrorCode.NONE, [{"group_id": "solo", "protocol_type": "", "group_state": "Empty"}])
    asyncio.run(scenario())


def test_offsets_of_an_empty_group_expire_after_the_retention_and_the_group_goes(tmp_path):
    async def scenario():
        clock = Clock()
        coordinator = make(tmp_path, clock, offsets_retention_ms=60_000)
        leader, follower = await stable_pair(coordinator)
        await coordinator.commit_offsets("g", 1, leader["member_id"], None, {("t", 0): (7, "")})
        await coordinator.commit_offsets("other", -1, "", None, {("t", 0): (1, "")}, retention_ms=1000)
        await coordinator.leave_group("g", [(follower["member_id"], None)])
        assert await coordinator.delete_group("g") == ErrorCode.NON_EMPTY_GROUP
        await coordinator.leave_group("g", [(leader["member_id"], None)])
        assert (await coordinator.describe_group("g"))["group_state"] == "Empty"
        clock.ms += 2000
        assert await coordinator.expire_offsets() == 1  # only the explicit retention of "other" ran out
        assert (await coordinator.fetch_offsets("g", None))[1][("t", 0)].offset == 7
        clock.ms += 60_000
        assert await coordinator.expire_offsets() == 1
        assert (await coordinator.fetch_offsets("g", None))[1] == {}
        assert (await coordinator.describe_group("g"))["group_state"] == "Dead"
        assert await coordinator.delete_group("g") == ErrorCode.GROUP_ID_NOT_FOUND
    asyncio.run(scenario())


def test_a_group_that_moves_away_answers_its_waiting_members_not_coordinator(tmp_path):
    async def scenario():
        owned = {"g": True}
        coordinator = make(tmp_path)
        coordinator.owns = lambda group: owned.get(group, True)
        first = await join(coordinator)
        # A second member's join waits for the first to rejoin; the group moves meanwhile.
        waiting = asyncio.ensure_future(join(coordinator))
        while len((await coordinator.describe_group("g"))["members"]) < 2:
            await asyncio.sleep(0)  # let the second join reach the group
        owned["g"] = False
        coordinator.unload_moved_groups()
        assert (await waiting)["error_code"] == ErrorCode.NOT_COORDINATOR
        assert await coordinator.heartbeat("g", 1, first["member_id"], None) == ErrorCode.NOT_COORDINATOR
    asyncio.run(scenario())


def test_join_validation(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        too_short = await join(coordinator, session_ms=10)
        assert too_short["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
        await join(coordinator)
        other = await coordinator.join_group("g", "", None, "c", "/h", SESSION_MS, SESSION_MS, "consumer",
                                             [("sticky", b"")], False)
        assert other["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(coordinator, group=""))["error_code"] == ErrorCode.INVALID_GROUP_ID
    asyncio.run(scenario())


@pytest.mark.parametrize("groups", [200])
def test_placement_agrees_and_moves_only_what_a_broker_change_must(groups):
    names = [f"group-{i}" for i in range(groups)]
    before = {g: coordinator_for(g, [1, 2, 3]) for g in names}
    assert before == {g: coordinator_for(g, [3, 2, 1]) for g in names}
    assert set(before.values()) == {1, 2, 3}
    after = {g: coordinator_for(g, [1, 2]) for g in names}
    assert all(after[g] == before[g] for g in names if before[g] != 3)
    assert coordinator_for("g", []) is None


def test_a_static_leader_that_does_not_rejoin_hands_leadership_to_a_member_that_did(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator, instances=("host-1", "host-2"))
        # The follower's subscription changes; the leader heartbeats but does not rejoin in the rebalance timeout.
        async def heartbeats():
            while True:
                await coordinator.heartbeat("g", 1, leader["member_id"], leader["instance"])
                await asyncio.sleep(SESSION_MS / 4000)
        beating = asyncio.ensure_future(heartbeats())
        answer = await join(coordinator, follower["member_id"], instance=follower["instance"],
                            protocols=[("range", b"more topics")])
        beating.cancel()
        assert answer["generation_id"] == 2 and answer["leader"] == follower["member_id"]
        assert {m["member_id"] for m in answer["members"]} == {leader["member_id"], follower["member_id"]}
    asyncio.run(scenario())


def test_an_active_consumer_group_loses_only_the_offsets_of_topics_it_no_longer_subscribes_to(tmp_path):
    async def scenario():
        from pipeline.protocol.consumer_protocol import encode_subscription
        clock = Clock()
        coordinator = make(tmp_path, clock, offsets_retention_ms=60_000)
        subscription = encode_subscription({"topics": ["t"], "user_data": None, "owned_partitions": []}, 1)
        member = await join(coordinator, protocols=[("range", subscription)])
        await coordinator.sync_group("g", 1, member["member_id"], None, {member["member_id"]: b""})
        committed = await coordinator.commit_offsets("g", 1, member["member_id"], None,
                                                     {("t", 0): (3, ""), ("old", 0): (4, "")})
        assert set(committed.values()) == {ErrorCode.NONE}
        clock.ms += 61_000
        assert await coordinator.heartbeat("g", 1, member["member_id"], None) == ErrorCode.NONE
        assert await coordinator.expire_offsets() == 1
        assert set((await coordinator.fetch_offsets("g", None))[1]) == {("t", 0)}
    asyncio.run(scenario())


def test_a_static_leader_back_under_a_new_id_is_not_told_to_assign_again(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator, instances=("host-1", "host-2"))
        back = await join(coordinator, instance=leader["instance"])
        assert (back["generation_id"], back["leader"], back["members"]) == (1, leader["member_id"], [])
        assert (await coordinator.sync_group("g", 1, back["member_id"], leader["instance"], {}))["assignment"] == b"a"
        assert await coordinator.heartbeat("g", 1, follower["member_id"], follower["instance"]) == ErrorCode.NONE
    asyncio.run(scenario())


def test_a_static_member_back_with_other_metadata_bytes_but_the_same_protocol_causes_no_rebalance(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator, instances=("host-1", "host-2"))
        back = await join(coordinator, instance=follower["instance"],
                          protocols=[("range", b"new user data"), ("roundrobin", b"new user data")])
        assert back["generation_id"] == 1
        assert (await coordinator.describe_group("g"))["group_state"] == "Stable"
    asyncio.run(scenario())
