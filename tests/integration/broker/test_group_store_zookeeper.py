"""ZkGroupStore against a real ZooKeeper: offsets where the paper's consumers keep theirs, and fencing of a
coordinator that lost its group."""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator.group_store import NO_VERSION, CommittedOffset, GroupFenced, ZkGroupStore
from pipeline.zk import layout
from pipeline.zk.client import BoundedZk


def test_offsets_are_shared_with_the_papers_consumers_and_a_stale_coordinator_is_fenced(zk):
    async def scenario():
        store = ZkGroupStore(BoundedZk(zk, 10.0), 10.0)
        stale = ZkGroupStore(BoundedZk(zk, 10.0), 10.0)
        version = await store.store_group("g", {"version": 1, "generation": 1, "members": []}, NO_VERSION)
        await store.commit_offsets("g", {("t", 0): CommittedOffset(5, "", 1), ("t", 1): CommittedOffset(6, "m", 1)},
                                   version)
        # The paper's consumers read the bare offset; metadata travels in the JSON form.
        assert zk.get(layout.offset_path("g", "t", 0))[0] == b"5"
        assert layout.parse_offset(zk.get(layout.offset_path("g", "t", 1))[0]) == 6
        # An offset a paper consumer wrote is read back with the znode's modification time as commit time.
        zk.create(layout.offset_path("g", "u", 3), b"42", makepath=True)
        fetched = await store.fetch_offsets("g", None)
        assert {tp: (c.offset, c.metadata) for tp, c in fetched.items()} == {
            ("t", 0): (5, ""), ("t", 1): (6, "m"), ("u", 3): (42, "")}
        assert fetched[("u", 3)].commit_timestamp == zk.exists(layout.offset_path("g", "u", 3)).mtime
        assert await store.fetch_offsets("g", [("t", 1), ("t", 9)]) == {("t", 1): fetched[("t", 1)]}
        # Another coordinator takes the group over (a new record version): the old one can no longer write.
        new_version = await stale.store_group("g", {"version": 1, "generation": 2, "members": []}, version)
        with pytest.raises(GroupFenced):
            await store.commit_offsets("g", {("t", 0): CommittedOffset(99, "", 2)}, version)
        with pytest.raises(GroupFenced):
            await store.store_group("g", {"version": 1, "generation": 2, "members": []}, version)
        assert zk.get(layout.offset_path("g", "t", 0))[0] == b"5"
        await stale.commit_offsets("g", {("t", 0): CommittedOffset(7, "", 3)}, new_version)
        assert (await store.fetch_offsets("g", [("t", 0)]))[("t", 0)].offset == 7
        assert await store.group_ids() == ["g"]
        await stale.delete_offsets("g", [("u", 3)], new_version)
        assert ("u", 3) not in await store.fetch_offsets("g", None)
        await stale.delete_group("g", new_version)
        assert zk.exists(layout.group_path("g")) is None
        assert await store.load("g") == (None, NO_VERSION)
    asyncio.run(scenario())


def test_concurrent_commits_of_a_group_share_transactions_and_the_last_offset_wins(zk):
    async def scenario():
        store = ZkGroupStore(BoundedZk(zk, 10.0), 10.0)
        version = await store.store_group("g", {"version": 1, "generation": 1, "members": []}, NO_VERSION)
        await asyncio.gather(*(store.commit_offsets("g", {("t", i % 10): CommittedOffset(i, "", 1)}, version)
                               for i in range(100)))
        assert {p: layout.parse_offset(zk.get(layout.offset_path("g", "t", p))[0]) for p in range(10)} == {
            p: 90 + p for p in range(10)}
        transactions = {zk.exists(layout.offset_path("g", "t", p)).mzxid for p in range(10)}
        assert len(transactions) < 10  # several partitions' commits went in one transaction
        # A stale commit queued with newer ones fails alone.
        newer = await store.store_group("g", {"version": 1, "generation": 2, "members": []}, version)
        results = await asyncio.gather(store.commit_offsets("g", {("t", 0): CommittedOffset(1000, "", 1)}, version),
                                       store.commit_offsets("g", {("t", 1): CommittedOffset(1001, "", 1)}, newer),
                                       return_exceptions=True)
        assert isinstance(results[0], GroupFenced) and results[1] is None
        assert layout.parse_offset(zk.get(layout.offset_path("g", "t", 1))[0]) == 1001
    asyncio.run(scenario())
