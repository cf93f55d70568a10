"""ZkGroupStore's pending transactional offsets against a real ZooKeeper (the scenarios of
tests/support/txn_offset_scenarios.py, a new store standing for the coordinator after a failover), and the
fencing of a coordinator that lost the group."""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator.group_store import NO_VERSION, GroupFenced, GroupStore, ZkGroupStore
from pipeline.zk import layout
from pipeline.zk.client import BoundedZk
from tests.support.txn_offset_scenarios import RECORD, SCENARIOS, offset, visible


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_pending_transactional_offsets(zk, scenario):
    async def reopen(store: GroupStore) -> GroupStore:
        return ZkGroupStore(BoundedZk(zk, 10.0), 10.0)

    async def run():
        await scenario(await reopen(None), reopen)
    asyncio.run(run())


def test_pending_offsets_live_under_the_group_and_a_stale_coordinator_cannot_complete_them(zk):
    async def run():
        store = ZkGroupStore(BoundedZk(zk, 10.0), 10.0)
        version = await store.store_group("g", RECORD, NO_VERSION)
        await store.add_pending("g", 7, 0, 4, {("t", 0): offset(10)}, version)
        assert zk.get_children(layout.txn_offsets_path("g")) == ["7"]
        new_version = await ZkGroupStore(BoundedZk(zk, 10.0), 10.0).store_group("g", RECORD, version)
        with pytest.raises(GroupFenced):
            await store.complete_pending("g", 7, True, version)
        with pytest.raises(GroupFenced):
            await store.add_pending("g", 7, 0, 4, {("t", 1): offset(11)}, version)
        assert await visible(store) == {}
        await store.complete_pending("g", 7, True, new_version)
        assert await visible(store) == {("t", 0): (10, "m10")}
        assert zk.get_children(layout.txn_offsets_path("g")) == []
    asyncio.run(run())
