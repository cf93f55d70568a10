"""ReplicaManager.read answers a fetch that finds nothing past its offset without reading the log; the answer
is the one the log read gives (high watermark, LSO, log start offset, errors, aborted transactions, records)."""

from __future__ import annotations

import asyncio

import pytest
from tests.unit.broker.log.log_support import make_batch

from broker.log import LogConfig, LogManager
from broker.replica_manager import FetchResult, ReplicaManager
from pipeline.protocol.errors import ErrorCode


@pytest.fixture
def manager(tmp_path):
    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup()
    yield ReplicaManager(logs, broker_id=0)
    logs.shutdown()


def answer(result: FetchResult) -> tuple:
    records = result.records.read_bytes() if hasattr(result.records, "read_bytes") else result.records
    fields = (result.error_code, result.high_watermark, result.log_start_offset, result.last_stable_offset,
              result.aborted, result.size, records, result.stats is not None)
    result.release()
    return fields


def slow_answer(manager: ReplicaManager, offset: int, replica_id: int, read_committed: bool) -> tuple:
    partition = manager.get_partition("t", 0)
    log_ = partition.log
    last_stable = log_.last_stable_offset
    bound = log_.log_end_offset if replica_id >= 0 else last_stable if read_committed else partition.high_watermark
    return answer(manager._read_log(partition, offset, 1 << 20, True, replica_id < 0, read_committed, bound,
                                    last_stable))


def states(manager: ReplicaManager):
    """The partition in turn: empty, with data below and above the high watermark, with an open transaction,
    with its log start offset moved up; yields after each change."""
    partition = manager.make_leader("t", 0, replicas=(0, 1), isr=(0, 1))
    yield
    for count in (3, 2):
        assert manager.append_records("t", 0, make_batch(count)).error_code == ErrorCode.NONE
        yield  # the follower has not fetched: the high watermark is behind the log end
    manager.read("t", 0, partition.log.log_end_offset, 1 << 20, True, replica_id=1).release()
    assert partition.high_watermark == partition.log.log_end_offset
    yield
    txn = make_batch(2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    assert manager.append_records("t", 0, txn).error_code == ErrorCode.NONE
    manager.read("t", 0, partition.log.log_end_offset, 1 << 20, True, replica_id=1).release()
    assert partition.log.last_stable_offset < partition.high_watermark
    yield
    partition.log.maybe_increment_log_start_offset(4)
    yield


@pytest.mark.parametrize("replica_id", [-1, 1])
@pytest.mark.parametrize("read_committed", [False, True])
def test_every_offset_in_every_state_reads_as_the_log_read_does(manager, replica_id, read_committed):
    compared = 0
    for _ in states(manager):
        for offset in range(-1, manager.get_partition("t", 0).log.log_end_offset + 3):
            # a follower's read first moves its log end offset and maybe the high watermark: compare after that
            manager.read("t", 0, offset, 1 << 20, True, replica_id, read_committed=read_committed).release()
            fast = answer(manager.read("t", 0, offset, 1 << 20, True, replica_id, read_committed=read_committed))
            assert fast == slow_answer(manager, offset, replica_id, read_committed), (offset, replica_id)
            compared += 1
    assert compared > 30


def test_an_empty_read_at_the_high_watermark_sees_the_next_append(manager):
    manager.make_leader("t", 0)
    assert answer(manager.read("t", 0, 0, 1 << 20, True))[:3] == (ErrorCode.NONE, 0, 0)
    manager.append_records("t", 0, make_batch(3))
    error_code, high_watermark, _, _, _, size, records, _ = answer(manager.read("t", 0, 0, 1 << 20, True))
    assert (error_code, high_watermark) == (ErrorCode.NONE, 3) and size == len(records) > 0
    assert answer(manager.read("t", 0, 3, 1 << 20, True))[1:6] == (3, 0, 3, None, 0)


def test_a_follower_empty_read_still_records_its_fetch(manager):
    partition = manager.make_leader("t", 0, replicas=(0, 1), isr=(0,))
    manager.append_records("t", 0, make_batch(3))
    proposals = []
    manager.isr_proposer = lambda p, isr: proposals.append(isr)
    manager.read("t", 0, 3, 1 << 20, True, replica_id=1).release()
    assert partition.followers[1].log_end_offset == 3 and proposals == [frozenset({0, 1})]


def test_a_long_poll_at_the_high_watermark_wakes_when_a_follower_moves_it(manager):
    partition = manager.make_leader("t", 0, replicas=(0, 1), isr=(0, 1))
    manager.append_records("t", 0, make_batch(3))  # above the high watermark until the follower has it

    async def long_poll() -> tuple:
        assert answer(manager.read("t", 0, 0, 1 << 20, True))[5] == 0
        waiting = asyncio.ensure_future(manager.wait_for_data([("t", 0)], 30.0))
        await asyncio.sleep(0)
        assert not waiting.done()
        manager.read("t", 0, 3, 1 << 20, True, replica_id=1).release()
        assert await waiting
        return answer(manager.read("t", 0, 0, 1 << 20, True))

    error_code, high_watermark, _, _, _, size, records, _ = asyncio.run(long_poll())
    assert (error_code, high_watermark, partition.high_watermark) == (ErrorCode.NONE, 3, 3)
    assert size == len(records) > 0
