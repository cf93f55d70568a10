"""GroupCoordinator's transactional offsets (Kafka's handleTxnCommitOffsets and handleTxnCompletion) with the
standalone file store: pending until the marker of the group's __consumer_offsets partition, member and
generation checks, retried markers, a restart in between, and groups that move, expire or are deleted."""

from __future__ import annotations

import asyncio

from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.group_store import FileGroupStore
from pipeline.protocol.errors import ErrorCode
from tests.unit.broker.coordinator.test_group_coordinator import Clock, make, stable_pair

PRODUCER, EPOCH = 4000, 2


async def txn_commit(coordinator, offsets, group="g", producer=PRODUCER, epoch=EPOCH, generation=-1, member="",
                     instance=None):
    return await coordinator.txn_commit_offsets(group, producer, epoch, generation, member, instance, offsets)


async def committed(coordinator, group="g"):
    code, offsets = await coordinator.fetch_offsets(group, None)
    assert code == ErrorCode.NONE
    return {tp: c.offset for tp, c in offsets.items()}


def test_offsets_of_a_transaction_are_visible_only_after_its_commit_marker(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        partition = coordinator.offsets_partition("solo")
        assert partition == coordinator.offsets_partition("solo") and 0 <= partition < 50
        await coordinator.commit_offsets("solo", -1, "", None, {("t", 0): (1, "")})
        answer = await txn_commit(coordinator, {("t", 0): (10, "a"), ("t", 1): (11, "")}, group="solo")
        assert answer == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE}
        assert await committed(coordinator, "solo") == {("t", 0): 1}
        assert await coordinator.unstable_offsets("solo") == (ErrorCode.NONE, {("t", 0), ("t", 1)})
        # Another offsets partition's marker, or another producer's, leaves them pending.
        other = (partition + 1) % 50
        assert await coordinator.complete_txn_offsets(PRODUCER, EPOCH, True, other) == ErrorCode.NONE
        assert await coordinator.complete_txn_offsets(PRODUCER + 1, EPOCH, True, partition) == ErrorCode.NONE
        assert await committed(coordinator, "solo") == {("t", 0): 1}
        before = coordinator.metrics.offset_commits
        assert await coordinator.complete_txn_offsets(PRODUCER, EPOCH, True, partition) == ErrorCode.NONE
        assert await committed(coordinator, "solo") == {("t", 0): 10, ("t", 1): 11}
        assert coordinator.metrics.offset_commits == before + 2
        assert await coordinator.unstable_offsets("solo") == (ErrorCode.NONE, set())
        # The marker retried.
        assert await coordinator.complete_txn_offsets(PRODUCER, EPOCH, True, partition) == ErrorCode.NONE
        assert await committed(coordinator, "solo") == {("t", 0): 10, ("t", 1): 11}
    asyncio.run(scenario())


def test_an_abort_marker_drops_them_and_a_restarted_coordinator_completes_what_was_pending(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        await txn_commit(coordinator, {("t", 0): (10, "")}, group="aborted")
        await txn_commit(coordinator, {("t", 0): (20, "")}, group="kept", producer=PRODUCER + 1)
        assert await coordinator.complete_txn_offsets(
            PRODUCER, EPOCH, False, coordinator.offsets_partition("aborted")) == ErrorCode.NONE
        assert await committed(coordinator, "aborted") == {}
        assert await coordinator.unstable_offsets("aborted") == (ErrorCode.NONE, set())
        coordinator.store.close()

        restarted = GroupCoordinator(FileGroupStore(tmp_path), coordinator.config, clock_ms=Clock())
        assert await restarted.unstable_offsets("kept") == (ErrorCode.NONE, {("t", 0)})
        assert await restarted.complete_txn_offsets(
            PRODUCER + 1, EPOCH, True, restarted.offsets_partition("kept")) == ErrorCode.NONE
        assert await committed(restarted, "kept") == {("t", 0): 20}
    asyncio.run(scenario())


def test_a_group_with_members_checks_the_member_and_generation_when_given(tmp_path):
    async def scenario():
        coordinator = make(tmp_path)
        leader, follower = await stable_pair(coordinator, instances=(None, "static"))
        offsets = {("t", 0): (5, "")}
        assert await txn_commit(coordinator, offsets, generation=1, member="nobody") == {
            ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert await txn_commit(coordinator, offsets, generation=7, member=leader["member_id"]) == {
            ("t", 0): ErrorCode.ILLEGAL_GENERATION}
        assert await txn_commit(coordinator, offsets, generation=1, member="old-id", instance="static") == {
            ("t", 0): ErrorCode.FENCED_INSTANCE_ID}
        assert await coordinator.unstable_offsets("g") == (ErrorCode.NONE, set())
        assert await txn_commit(coordinator, offsets, generation=1, member=follower["member_id"],
                                instance="static") == {("t", 0): ErrorCode.NONE}
        # v0-v2 carry neither: a producer outside the group (a mirror's) commits with generation -1.
        assert await txn_commit(coordinator, {("t", 1): (6, "")}) == {("t", 1): ErrorCode.NONE}
        assert await coordinator.unstable_offsets("g") == (ErrorCode.NONE, {("t", 0), ("t", 1)})
    asyncio.run(scenario())


def test_a_zombie_producer_epoch_and_oversized_metadata_are_refused(tmp_path):
    async def scenario():
        coordinator = make(tmp_path, offset_metadata_max_bytes=4)
        assert await txn_commit(coordinator, {("t", 0): (1, "")}) == {("t", 0): ErrorCode.NONE}
        assert await txn_commit(coordinator, {("t", 0): (2, "")}, epoch=EPOCH - 1) == {
            ("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert await txn_commit(coordinator, {("t", 1): (3, "too long")}) == {
            ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
        await coordinator.complete_txn_offsets(PRODUCER, EPOCH, True, coordinator.offsets_partition("g"))
        assert await committed(coordinator) == {("t", 0): 1}
    asyncio.run(scenario())


def test_pending_offsets_keep_an_expired_group_and_go_with_a_deleted_one(tmp_path):
    async def scenario():
        clock = Clock()
        coordinator = make(tmp_path, clock, offsets_retention_ms=60_000)
        await coordinator.commit_offsets("kept", -1, "", None, {("t", 0): (1, "")})
        await txn_commit(coordinator, {("t", 1): (2, "")}, group="kept")
        clock.ms += 120_000
        assert await coordinator.expire_offsets() == 1
        # The committed offset expired; the pending one keeps the group for its marker.
        assert (await coordinator.describe_group("kept"))["group_state"] == "Empty"
        await coordinator.complete_txn_offsets(PRODUCER, EPOCH, True, coordinator.offsets_partition("kept"))
        assert await committed(coordinator, "kept") == {("t", 1): 2}

        await txn_commit(coordinator, {("t", 0): (3, "")}, group="deleted")
        assert await coordinator.delete_group("deleted") == ErrorCode.NONE
        assert await coordinator.complete_txn_offsets(
            PRODUCER, EPOCH, True, coordinator.offsets_partition("deleted")) == ErrorCode.NONE
        assert await committed(coordinator, "deleted") == {}
    asyncio.run(scenario())


def test_a_group_coordinated_elsewhere_asks_the_marker_to_be_retried(tmp_path):
    async def scenario():
        owned = {"g": True}
        coordinator = make(tmp_path)
        coordinator.owns = lambda group: owned.get(group, True)
        await txn_commit(coordinator, {("t", 0): (5, "")})
        owned["g"] = False
        coordinator.unload_moved_groups()
        assert await txn_commit(coordinator, {("t", 0): (6, "")}) == {("t", 0): ErrorCode.NOT_COORDINATOR}
        partition = coordinator.offsets_partition("g")
        assert await coordinator.complete_txn_offsets(PRODUCER, EPOCH, True, partition) == \
            ErrorCode.NOT_LEADER_OR_FOLLOWER
        owned["g"] = True
        assert await coordinator.complete_txn_offsets(PRODUCER, EPOCH, True, partition) == ErrorCode.NONE
        assert await committed(coordinator) == {("t", 0): 5}
    asyncio.run(scenario())
