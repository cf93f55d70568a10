"""Pending transactional offsets in a GroupStore, as scenarios any store runs (FileGroupStore in the unit tests,
ZkGroupStore against a real ZooKeeper in the integration tests): ``reopen(store)`` gives the store a restarted
broker, or a new coordinator after a failover, would use."""

from __future__ import annotations

from typing import Awaitable, Callable

import pytest

from broker.coordinator.group_store import NO_VERSION, CommittedOffset, GroupStore, StaleProducerEpoch

Reopen = Callable[[GroupStore], Awaitable[GroupStore]]
RECORD = {"version": 1, "protocol_type": "", "generation": 0, "members": []}


def offset(value: int) -> CommittedOffset:
    return CommittedOffset(value, f"m{value}", 1_700_000_000_000)


async def visible(store: GroupStore, group: str = "g") -> dict:
    return {tp: (c.offset, c.metadata) for tp, c in (await store.fetch_offsets(group, None)).items()}


async def pending_offsets_become_committed_only_at_the_commit_marker(store: GroupStore, reopen: Reopen) -> None:
    version = await store.store_group("g", RECORD, NO_VERSION)
    await store.commit_offsets("g", {("t", 0): offset(1)}, version)
    await store.add_pending("g", 7, 3, 12, {("t", 0): offset(10), ("t", 1): offset(11)}, version)
    # A later commit of the same transaction merges into the pending set, later offsets winning.
    await store.add_pending("g", 7, 3, 12, {("t", 1): offset(21), ("u", 0): offset(30)}, version)
    assert await visible(store) == {("t", 0): (1, "m1")}
    with pytest.raises(StaleProducerEpoch):
        await store.add_pending("g", 7, 2, 12, {("t", 0): offset(99)}, version)

    store = await reopen(store)
    pending = await store.pending_offsets("g")
    assert list(pending) == [7]
    assert (pending[7].producer_epoch, pending[7].partition_index) == (3, 12)
    assert {tp: c.offset for tp, c in pending[7].offsets.items()} == {("t", 0): 10, ("t", 1): 21, ("u", 0): 30}
    assert await store.pending_groups(7, lambda group: True) == ["g"]
    assert await store.pending_groups(7, lambda group: group != "g") == []
    assert await store.pending_groups(8, lambda group: True) == []

    written = await store.complete_pending("g", 7, True, version)
    assert written is not None and {tp: c.offset for tp, c in written.items()} == {
        ("t", 0): 10, ("t", 1): 21, ("u", 0): 30}
    expected = {("t", 0): (10, "m10"), ("t", 1): (21, "m21"), ("u", 0): (30, "m30")}
    assert await visible(store) == expected
    assert await store.pending_offsets("g") == {}
    # The marker retried: nothing pending, nothing changes.
    assert await store.complete_pending("g", 7, True, version) is None
    store = await reopen(store)
    assert await visible(store) == expected
    assert await store.pending_groups(7, lambda group: True) == []


async def an_abort_marker_drops_the_pending_offsets(store: GroupStore, reopen: Reopen) -> None:
    version = await store.store_group("g", RECORD, NO_VERSION)
    await store.commit_offsets("g", {("t", 0): offset(1)}, version)
    await store.add_pending("g", 7, 0, 4, {("t", 0): offset(10), ("t", 1): offset(11)}, version)
    store = await reopen(store)
    assert await store.complete_pending("g", 7, False, version) == {}
    assert await visible(store) == {("t", 0): (1, "m1")}
    assert await store.pending_offsets("g") == {}
    store = await reopen(store)
    assert await visible(store) == {("t", 0): (1, "m1")}
    assert await store.pending_offsets("g") == {}


async def the_later_of_a_plain_and_a_transactional_commit_wins(store: GroupStore, reopen: Reopen) -> None:
    """Kafka's rule: a transaction's offset replaces a committed one only if its TxnOffsetCommit came after that
    commit; a plain OffsetCommit made while the transaction is open stays when it commits."""
    version = await store.store_group("g", RECORD, NO_VERSION)
    await store.commit_offsets("g", {("t", 0): offset(1), ("t", 1): offset(2)}, version)
    await store.add_pending("g", 7, 0, 4, {("t", 0): offset(10), ("t", 1): offset(11)}, version)
    await store.commit_offsets("g", {("t", 1): offset(50)}, version)
    store = await reopen(store)
    written = await store.complete_pending("g", 7, True, version)
    assert written is not None and set(written) == {("t", 0)}
    assert await visible(store) == {("t", 0): (10, "m10"), ("t", 1): (50, "m50")}


async def deleting_the_group_drops_its_pending_offsets(store: GroupStore, reopen: Reopen) -> None:
    version = await store.store_group("g", RECORD, NO_VERSION)
    await store.add_pending("g", 7, 0, 4, {("t", 0): offset(10)}, version)
    await store.add_pending("g", 8, 0, 4, {("t", 0): offset(20)}, version)
    await store.delete_group("g", version)
    store = await reopen(store)
    assert await store.pending_offsets("g") == {}
    assert await store.complete_pending("g", 7, True, NO_VERSION) is None
    assert await visible(store) == {}


SCENARIOS = [pending_offsets_become_committed_only_at_the_commit_marker, an_abort_marker_drops_the_pending_offsets,
             the_later_of_a_plain_and_a_transactional_commit_wins, deleting_the_group_drops_its_pending_offsets]
