"""A leader's replication bookkeeping (ReplicaManager + Partition over a real Log): follower positions move
the high watermark, consumers read below it, followers join and leave the ISR, acks=all produces wait
for the ISR and fail as Kafka's do, and stale leader epochs are fenced."""

from __future__ import annotations

import asyncio

import pytest
from tests.unit.test_log_support import make_batch

from broker.log import LogConfig, LogManager
from broker.partition import monotonic_ms
from broker.replica_manager import ReplicaManager
from pipeline.protocol.errors import ErrorCode

LEADER, F2, F3 = 1, 2, 3


class Proposals:
    """Records the ISR changes the leader asks for and stores them at once, as ZooKeeper would."""

    def __init__(self) -> None:
        self.seen: list[frozenset[int]] = []

    def __call__(self, partition, isr: frozenset[int]) -> None:
        self.seen.append(isr)
        partition.isr_change_pending = False
        partition.update_isr(isr, partition.zk_version + 1)


@pytest.fixture
def manager(tmp_path):
    logs = LogManager([tmp_path / "logs"], LogConfig(min_insync_replicas=2))
    logs.startup()
    proposals = Proposals()
    replica_manager = ReplicaManager(logs, broker_id=LEADER, isr_proposer=proposals)
    replica_manager.proposals = proposals
    yield replica_manager
    logs.shutdown()


def lead(manager: ReplicaManager, isr=(LEADER, F2, F3)):
    return manager.make_leader("t", 0, None, 5, (LEADER, F2, F3), isr, zk_version=0)


def append(manager: ReplicaManager, count: int = 2, acks: int = -1):
    result = manager.append_records("t", 0, make_batch(count), [], acks)
    assert result.error_code == ErrorCode.NONE, result
    return result


def wait_for_isr(manager: ReplicaManager, appended) -> asyncio.Future:
    """An acks=all wait for ``appended`` started on the running loop."""
    return asyncio.ensure_future(manager.wait_replicated({("t", 0): appended.last_offset + 1}, 5))


def test_the_high_watermark_is_the_smallest_log_end_offset_in_the_isr(manager):
    partition = lead(manager)
    append(manager, 3)
    append(manager, 2)
    assert partition.log.log_end_offset == 5
    assert partition.high_watermark == 0  # the followers' positions are not known yet
    manager.read("t", 0, 3, 1 << 20, True, replica_id=F2).release()
    assert partition.high_watermark == 0
    manager.read("t", 0, 5, 1 << 20, True, replica_id=F3).release()
    assert partition.high_watermark == 3
    manager.read("t", 0, 5, 1 << 20, True, replica_id=F2).release()
    assert partition.high_watermark == 5


def test_consumers_read_below_the_high_watermark_followers_to_the_log_end(manager):
    partition = lead(manager)
    append(manager, 3)
    manager.read("t", 0, 3, 1 << 20, True, replica_id=F2).release()
    manager.read("t", 0, 3, 1 << 20, True, replica_id=F3).release()
    append(manager, 2)
    assert partition.high_watermark == 3
    consumer = manager.read("t", 0, 3, 1 << 20, True)
    assert consumer.error_code == ErrorCode.NONE and consumer.size == 0 and consumer.high_watermark == 3
    from_start = manager.read("t", 0, 0, 1 << 20, True)
    follower = manager.read("t", 0, 0, 1 << 20, True, replica_id=F2)
    assert 0 < from_start.size < follower.size
    from_start.release()
    follower.release()


def test_acks_all_waits_for_the_isr_and_times_out_without_it(manager):
    async def scenario():
        lead(manager)
        first = append(manager, 2)
        waiting = wait_for_isr(manager, first)
        await asyncio.sleep(0)
        assert not waiting.done()
        manager.read("t", 0, 2, 1 << 20, True, replica_id=F2).release()
        await asyncio.sleep(0)
        assert not waiting.done()
        manager.read("t", 0, 2, 1 << 20, True, replica_id=F3).release()
        assert await waiting == {}
        second = append(manager, 1)
        assert await manager.wait_replicated({("t", 0): second.last_offset + 1}, 0.05) == {
            ("t", 0): ErrorCode.REQUEST_TIMED_OUT}
    asyncio.run(scenario())


def test_acks_all_refuses_below_min_insync_and_fails_after_append_when_the_isr_shrinks(manager):
    async def scenario():
        partition = lead(manager, isr=(LEADER,))
        before = partition.log.log_end_offset
        refused = manager.append_records("t", 0, make_batch(1), [], -1)
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.log.log_end_offset == before  # nothing appended
        assert manager.append_records("t", 0, make_batch(1), [], 1).error_code == ErrorCode.NONE

        partition.update_isr((LEADER, F2), 1)
        manager.read("t", 0, partition.log.log_end_offset, 1 << 20, True, replica_id=F2).release()
        appended = append(manager, 1)
        waiting = wait_for_isr(manager, appended)
        await asyncio.sleep(0)
        partition.update_isr((LEADER,), 2)  # the follower left before it had the batch
        assert await waiting == {("t", 0): ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
    asyncio.run(scenario())


def test_a_produce_waiting_when_leadership_moves_fails_with_not_leader(manager):
    async def scenario():
        lead(manager)
        appended = append(manager, 1)
        waiting = wait_for_isr(manager, appended)
        await asyncio.sleep(0)
        manager.make_follower("t", 0, None, F2, 6, (LEADER, F2, F3))
        assert await waiting == {("t", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}
        assert manager.append_records("t", 0, make_batch(1)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    asyncio.run(scenario())


def test_a_caught_up_follower_joins_the_isr_and_a_lagging_one_leaves(manager):
    partition = lead(manager, isr=(LEADER, F2))
    append(manager, 4)
    manager.read("t", 0, 4, 1 << 20, True, replica_id=F2).release()
    assert partition.high_watermark == 4
    manager.read("t", 0, 2, 1 << 20, True, replica_id=F3).release()
    assert manager.proposals.seen == []  # F3 is behind the high watermark
    manager.read("t", 0, 4, 1 << 20, True, replica_id=F3).release()
    assert manager.proposals.seen == [frozenset({LEADER, F2, F3})]
    assert partition.isr == {LEADER, F2, F3}

    partition.followers[F2].last_caught_up_ms = monotonic_ms() - 60_000
    manager.shrink_isrs(30_000)
    assert manager.proposals.seen[-1] == frozenset({LEADER, F3})
    assert partition.isr == {LEADER, F3}


def test_requests_with_another_leader_epoch_are_fenced(manager):
    lead(manager)
    append(manager, 1, acks=1)
    assert manager.read("t", 0, 0, 1 << 20, True, current_leader_epoch=4).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert manager.read("t", 0, 0, 1 << 20, True, current_leader_epoch=6).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    same = manager.read("t", 0, 0, 1 << 20, True, current_leader_epoch=5)
    assert same.error_code == ErrorCode.NONE
    same.release()
    assert manager.leader_partition("t", 0, 4)[1] == ErrorCode.FENCED_LEADER_EPOCH


def test_a_new_leader_records_its_epoch_where_its_log_ends(manager):
    partition = lead(manager)
    append(manager, 3, acks=1)
    manager.make_follower("t", 0, None, F2, 6, (LEADER, F2, F3))
    manager.make_leader("t", 0, None, 7, (LEADER, F2, F3), (LEADER, F2), zk_version=3)
    assert partition.log.end_offset_for_epoch(5) == (5, 3)
    assert partition.log.end_offset_for_epoch(7) == (7, 3)
