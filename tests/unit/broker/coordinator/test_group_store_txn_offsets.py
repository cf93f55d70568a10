"""The FileGroupStore's pending transactional offsets (the scenarios of tests/support/txn_offset_scenarios.py, a
restarted broker replaying the file), and the order of commits kept across a rewrite of the file."""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator.group_store import NO_VERSION, FileGroupStore, GroupStore
from tests.support.txn_offset_scenarios import RECORD, SCENARIOS, offset, visible


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_pending_transactional_offsets(tmp_path, scenario):
    async def reopen(store: GroupStore) -> GroupStore:
        assert isinstance(store, FileGroupStore)
        store.close()
        return FileGroupStore(tmp_path)

    async def run():
        store = await reopen(FileGroupStore(tmp_path))
        await scenario(store, reopen)
    asyncio.run(run())


def test_a_rewritten_file_keeps_which_commit_came_last(tmp_path):
    async def run():
        store = FileGroupStore(tmp_path)
        version = await store.store_group("g", RECORD, NO_VERSION)
        await store.add_pending("g", 7, 0, 4, {("t", 0): offset(10)}, version)
        await store.commit_offsets("g", {("t", 0): offset(50)}, version)
        await store.add_pending("g", 7, 0, 4, {("t", 1): offset(11)}, version)
        # The rewrite puts the live lines in the order their keys first appeared, the pending line first.
        store._start_compaction()
        await store.wait_compacted()
        store.close()
        store = FileGroupStore(tmp_path)
        await store.complete_pending("g", 7, True, version)
        assert await visible(store) == {("t", 0): (50, "m50"), ("t", 1): (11, "m11")}
        store.close()
    asyncio.run(run())
