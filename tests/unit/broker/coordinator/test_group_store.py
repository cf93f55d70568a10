"""The standalone broker's FileGroupStore: a commit costs the same whatever the number of groups (issue 26: with
~9,900 groups an OffsetCommit took 55 ms, re-encoding every group to measure the live size on the event loop),
and the file is compacted on a thread while commits go on, losing none of them."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import broker.coordinator.group_store as group_store
from broker.coordinator.group_store import NO_VERSION, CommittedOffset, FileGroupStore


def committed(offset: int) -> CommittedOffset:
    return CommittedOffset(offset, "m" * 40, 1_700_000_000_000, None)


async def fill(store: FileGroupStore, groups: int, commits: int = 1) -> None:
    for round_ in range(commits):
        for index in range(groups):
            await store.commit_offsets(f"group-{index}", {("events", 0): committed(round_)}, NO_VERSION)


def state(store: FileGroupStore) -> dict:
    return {group: dict(offsets) for group, offsets in store._offsets.items() if offsets}


def test_a_commit_encodes_only_what_it_commits_however_many_groups_there_are(tmp_path, monkeypatch):
    async def scenario():
        store = FileGroupStore(tmp_path)
        await fill(store, 10_000)
        assert os.path.getsize(store.path) > FileGroupStore.MIN_COMPACT_BYTES
        encoded = []
        real_dumps = json.dumps
        monkeypatch.setattr(group_store.json, "dumps", lambda *a, **k: encoded.append(1) or real_dumps(*a, **k))
        for round_ in range(3):
            await store.commit_offsets("group-7", {("events", 0): committed(100 + round_)}, NO_VERSION)
        await store.wait_compacted()
        store.close()
        return len(encoded)

    assert asyncio.run(scenario()) == 3


def test_compaction_runs_on_a_thread_and_keeps_what_was_committed_meanwhile(tmp_path):
    async def scenario():
        store = FileGroupStore(tmp_path)
        await fill(store, 2000, commits=12)
        await store.wait_compacted()
        assert store.compactions >= 1
        # Start one more rewrite and commit, delete and re-commit while it runs.
        await fill(store, 2000, commits=4)
        assert store._compaction is not None, "no rewrite started"
        await store.commit_offsets("late", {("events", 3): committed(77)}, NO_VERSION)
        await store.delete_group("group-5", NO_VERSION)
        await store.delete_offsets("group-6", [("events", 0)], NO_VERSION)
        assert store._compaction is not None, "the rewrite ran on the loop"
        await store.wait_compacted()
        await store.commit_offsets("after", {("events", 1): committed(5)}, NO_VERSION)
        assert store.compactions >= 2
        expected = state(store)
        store.close()
        return expected

    expected = asyncio.run(scenario())
    reopened = FileGroupStore(tmp_path)
    try:
        assert state(reopened) == expected
        assert "group-5" not in expected and "group-6" not in expected and expected["late"][("events", 3)].offset == 77
        assert stat.S_IMODE(os.stat(reopened.path).st_mode) == 0o600
    finally:
        reopened.close()


def test_the_live_size_kept_as_it_goes_is_the_size_of_a_rewrite(tmp_path):
    async def scenario():
        store = FileGroupStore(tmp_path)
        await fill(store, 300, commits=3)
        await store.store_group("group-1", {"generation": 3}, NO_VERSION)
        await store.delete_offsets("group-2", [("events", 0)], NO_VERSION)
        await store.delete_group("group-3", NO_VERSION)
        live = store._live_bytes
        store._start_compaction()
        await store.wait_compacted()
        store.close()
        return live

    live = asyncio.run(scenario())
    assert os.path.getsize(tmp_path / FileGroupStore.FILE_NAME) == live
