"""ZkTransactionStore against a real ZooKeeper: one znode per transactional id under /transactions, writes
conditional on its version (a stale coordinator is fenced), and a second coordinator taking an id over."""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator.transaction_coordinator import TransactionConfig, TransactionCoordinator
from broker.coordinator.transaction_store import NO_VERSION, TransactionFenced, ZkTransactionStore
from pipeline.protocol.errors import ErrorCode
from pipeline.zk.client import BoundedZk
from tests.unit.broker.coordinator.test_transaction_coordinator import Counter, RecordingMarkers


async def eventually(condition, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_records_live_one_znode_per_id_and_writes_are_conditional(zk):
    async def scenario():
        store = ZkTransactionStore(BoundedZk(zk, 10.0), 10.0)
        assert await store.load_all() == {}
        assert await store.store("mirror/eu.1", {"state": "Empty"}, NO_VERSION) == 0
        with pytest.raises(TransactionFenced):
            await store.store("mirror/eu.1", {"state": "Empty"}, NO_VERSION)
        assert await store.store("mirror/eu.1", {"state": "Ongoing"}, 0) == 1
        with pytest.raises(TransactionFenced):
            await store.store("mirror/eu.1", {"state": "PrepareAbort"}, 0)
        assert zk.get_children("/transactions") == ["mirror%2Feu%2E1"]
        assert await ZkTransactionStore(BoundedZk(zk, 10.0), 10.0).load_all() == {
            "mirror/eu.1": ({"state": "Ongoing"}, 1)}
        with pytest.raises(TransactionFenced):
            await store.delete("mirror/eu.1", 0)
        await store.delete("mirror/eu.1", 1)
        assert await store.load("mirror/eu.1") == (None, NO_VERSION)
    asyncio.run(scenario())


def test_a_coordinator_taking_over_resumes_the_markers_and_fences_the_old_one(zk):
    async def scenario():
        def coordinator() -> tuple[TransactionCoordinator, RecordingMarkers]:
            markers = RecordingMarkers()
            return TransactionCoordinator(ZkTransactionStore(BoundedZk(zk, 10.0), 10.0), TransactionConfig(),
                                          lambda t: True, Counter(), markers), markers
        old, old_markers = coordinator()
        assert await old.init_producer_id("t", 10000) == (ErrorCode.NONE, 1000, 0)
        assert await old.add_partitions("t", 1000, 0, {("a", 0), ("b", 2)}) == ErrorCode.NONE
        old_markers.hold = asyncio.Event()
        assert await old.end_transaction("t", 1000, 0, True) == ErrorCode.NONE
        new, new_markers = coordinator()
        await new.load_owned()
        await eventually(lambda: new_markers.written)
        [marker] = new_markers.written
        assert (marker.committed, marker.coordinator_epoch, marker.units) == (True, 1, {("a", 0, None),
                                                                                        ("b", 2, None)})
        await eventually(lambda: new._entries["t"].metadata.state.value == "CompleteCommit")
        # The old coordinator's completion is refused: it drops the id.
        old_markers.hold.set()
        await eventually(lambda: old.owned_ids() == [])
        assert (await new.describe("t"))[1].state.value == "CompleteCommit"
        assert await new.init_producer_id("t", 10000) == (ErrorCode.NONE, 1000, 1)
    asyncio.run(scenario())
