"""ReplicaManager.wait_for_data, the wait of a long-polling Fetch: True when a watched partition wakes it,
False at its timeout, and its waiter gone from every partition afterwards (also when cancelled). A follower's
wait ends at the next append; a consumer's only when the high watermark moves, since it reads below it."""

from __future__ import annotations

import asyncio

import pytest
from tests.unit.broker.log.log_support import make_batch

from broker.log import LogConfig, LogManager
from broker.replica_manager import ReplicaManager


@pytest.fixture
def manager(tmp_path):
    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup()
    replica_manager = ReplicaManager(logs, broker_id=0)
    for index in (0, 1):
        replica_manager.make_leader("t", index)
    yield replica_manager
    logs.shutdown()


def waiters(manager: ReplicaManager) -> list:
    return [w for index in (0, 1) for w in manager.get_partition("t", index)._waiters]


def test_an_append_to_any_watched_partition_wakes_the_wait(manager):
    async def run() -> bool:
        waiting = asyncio.ensure_future(manager.wait_for_data([("t", 0), ("t", 1), ("t", 9)], 30.0))
        await asyncio.sleep(0)
        assert not waiting.done() and len(waiters(manager)) == 2
        manager.append_records("t", 1, make_batch(1))
        return await waiting

    assert asyncio.run(run()) is True
    assert waiters(manager) == []


def test_the_wait_ends_false_at_its_timeout(manager):
    async def run() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        woken = await manager.wait_for_data([("t", 0)], 0.05)
        return woken, loop.time() - started

    woken, waited = asyncio.run(run())
    assert woken is False and waited >= 0.04
    assert waiters(manager) == []


def test_a_cancelled_wait_leaves_no_waiter(manager):
    async def run() -> None:
        waiting = asyncio.ensure_future(manager.wait_for_data([("t", 0), ("t", 1)], 30.0))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert waiters(manager) == []
        manager.append_records("t", 0, make_batch(1))  # waking after the cancel is harmless

    asyncio.run(run())


@pytest.fixture
def replicated(tmp_path):
    """Leader (broker 0) of t-0 with broker 1 in the ISR: an append leaves the high watermark until 1 fetches."""
    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup()
    replica_manager = ReplicaManager(logs, broker_id=0)
    replica_manager.make_leader("t", 0, replicas=(0, 1), isr=(0, 1))
    yield replica_manager
    logs.shutdown()


def test_an_append_wakes_a_followers_wait_but_not_a_consumers_until_the_high_watermark_moves(replicated):
    partition = replicated.get_partition("t", 0)

    async def run() -> None:
        consumer = asyncio.ensure_future(replicated.wait_for_data([("t", 0)], 30.0, follower=False))
        follower = asyncio.ensure_future(replicated.wait_for_data([("t", 0)], 30.0))
        await asyncio.sleep(0)
        replicated.append_records("t", 0, make_batch(1))
        await asyncio.sleep(0)
        assert follower.done() and await follower is True
        assert not consumer.done() and partition.log.high_watermark == 0
        replicated.read("t", 0, 1, 1 << 20, True, replica_id=1)  # the follower caught up: the watermark moves
        assert partition.log.high_watermark == 1
        assert await asyncio.wait_for(consumer, 5) is True

    asyncio.run(run())
    assert partition._waiters == [] and partition._hw_waiters == []


def test_a_consumers_wait_ends_when_the_replica_stops_leading(replicated):
    partition = replicated.get_partition("t", 0)

    async def run() -> bool:
        consumer = asyncio.ensure_future(replicated.wait_for_data([("t", 0)], 30.0, follower=False))
        await asyncio.sleep(0)
        partition.become_follower(1, 1, (0, 1))
        return await asyncio.wait_for(consumer, 5)

    assert asyncio.run(run()) is True
