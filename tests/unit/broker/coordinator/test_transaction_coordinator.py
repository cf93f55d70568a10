"""TransactionCoordinator on a FileTransactionStore with a recording marker channel: Kafka's answers for
InitProducerId (new ids, epoch bumps, fencing an open transaction, KIP-360, epoch exhaustion), AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, the markers and completion, timeouts, expiry, and a second coordinator taking over."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.coordinator.coordinator_placement import partition_for
from broker.coordinator.transaction_coordinator import TransactionConfig, TransactionCoordinator
from broker.coordinator.transaction_marker_channel import TransactionMarker
from broker.coordinator.transaction_metadata import TransactionMetadata, TransactionState
from broker.coordinator.transaction_store import FileTransactionStore
from pipeline.protocol.errors import ErrorCode

S = TransactionState
E = ErrorCode


class RecordingMarkers:
    """A marker channel that records each marker; ``hold`` keeps writes waiting until released."""

    def __init__(self) -> None:
        self.written: list[TransactionMarker] = []
        self.result = True
        self.hold: asyncio.Event | None = None

    async def write(self, marker: TransactionMarker) -> bool:
        self.written.append(marker)
        if self.hold is not None:
            await self.hold.wait()
        return self.result

    def close(self) -> None:
        pass


class Counter:
    def __init__(self, first: int = 1000) -> None:
        self.next = first

    def next_producer_id(self) -> int:
        self.next += 1
        return self.next - 1


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make(tmp_path: Path, clock: Clock | None = None, owns=lambda t: True,
         store: FileTransactionStore | None = None) -> tuple[TransactionCoordinator, RecordingMarkers]:
    markers = RecordingMarkers()
    coordinator = TransactionCoordinator(store or FileTransactionStore(tmp_path),
                                         TransactionConfig(max_timeout_ms=60000, id_expiration_ms=3_600_000),
                                         owns, Counter(), markers, time_ms=clock or Clock())
    return coordinator, markers


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def state(coordinator: TransactionCoordinator, transactional_id: str = "t") -> TransactionMetadata:
    code, metadata = await coordinator.describe(transactional_id)
    assert code == E.NONE
    return metadata


def test_a_committed_transaction_goes_through_prepare_markers_and_complete(tmp_path) -> None:
    async def scenario():
        coordinator, markers = make(tmp_path)
        assert await coordinator.init_producer_id("t", 30000) == (E.NONE, 1000, 0)
        assert await coordinator.add_partitions("t", 1000, 0, {("a", 0), ("b", 1)}) == E.NONE
        assert await coordinator.add_partitions("t", 1000, 0, {("a", 0)}) == E.NONE
        assert await coordinator.add_offsets("t", 1000, 0, "group") == E.NONE
        ongoing = await state(coordinator)
        assert ongoing.state == S.ONGOING and ongoing.start_time_ms == 1_000_000
        offsets = ("__consumer_offsets", partition_for("group", 50))
        assert ongoing.partitions == {("a", 0), ("b", 1), offsets}
        markers.hold = asyncio.Event()
        assert await coordinator.end_transaction("t", 1000, 0, True) == E.NONE
        await settle()
        assert (await state(coordinator)).state == S.PREPARE_COMMIT
        # While the markers are written, the producer's retry is told to wait, the opposite outcome refused.
        assert await coordinator.end_transaction("t", 1000, 0, True) == E.CONCURRENT_TRANSACTIONS
        assert await coordinator.end_transaction("t", 1000, 0, False) == E.INVALID_TXN_STATE
        assert await coordinator.add_partitions("t", 1000, 0, {("c", 0)}) == E.CONCURRENT_TRANSACTIONS
        markers.hold.set()
        await settle()
        done = await state(coordinator)
        assert (done.state, done.partitions) == (S.COMPLETE_COMMIT, frozenset())
        [marker] = markers.written
        assert (marker.producer_id, marker.producer_epoch, marker.committed, marker.coordinator_epoch) == \
            (1000, 0, True, 0)
        assert marker.units == {("a", 0, None), ("b", 1, None), (*offsets, "group")}
        assert await coordinator.end_transaction("t", 1000, 0, True) == E.NONE
        assert await coordinator.end_transaction("t", 1000, 0, False) == E.INVALID_TXN_STATE
        # The next transaction starts from CompleteCommit.
        assert await coordinator.add_partitions("t", 1000, 0, {("a", 0)}) == E.NONE
        assert coordinator.metrics.committed == 1
        coordinator.store.close()
        return await FileTransactionStore(tmp_path).load("t")

    record, _ = asyncio.run(scenario())
    assert record["state"] == "Ongoing" and record["partitions"] == [["a", 0]]


def test_requests_naming_the_wrong_producer_or_state_get_kafkas_errors(tmp_path) -> None:
    async def scenario():
        coordinator, _ = make(tmp_path, owns=lambda t: t != "elsewhere")
        assert (await coordinator.init_producer_id("t", 60001))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await coordinator.init_producer_id("t", 0))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await coordinator.init_producer_id("elsewhere", 1000))[0] == E.NOT_COORDINATOR
        assert await coordinator.add_partitions("unknown", 1, 0, {("a", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
        assert await coordinator.describe("unknown") == (E.TRANSACTIONAL_ID_NOT_FOUND, None)
        await coordinator.init_producer_id("t", 1000)
        assert await coordinator.add_partitions("t", 999, 0, {("a", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
        assert await coordinator.add_partitions("t", 1000, 1, {("a", 0)}) == E.PRODUCER_FENCED
        assert await coordinator.end_transaction("t", 1000, 0, True) == E.INVALID_TXN_STATE
        assert await coordinator.end_transaction("t", 1000, 0, False) == E.INVALID_TXN_STATE
        coordinator.store.close()

    asyncio.run(scenario())


def test_a_new_instance_fences_the_open_transaction_of_the_old_one(tmp_path) -> None:
    async def scenario():
        coordinator, markers = make(tmp_path)
        await coordinator.init_producer_id("t", 30000)
        assert await coordinator.init_producer_id("t", 30000) == (E.NONE, 1000, 1)
        assert await coordinator.add_partitions("t", 1000, 1, {("a", 0)}) == E.NONE
        # The new instance: the open transaction is aborted with the epoch bumped, and it is told to retry.
        assert (await coordinator.init_producer_id("t", 30000))[0] == E.CONCURRENT_TRANSACTIONS
        await settle()
        [marker] = markers.written
        assert (marker.producer_epoch, marker.committed, marker.units) == (2, False, {("a", 0, None)})
        assert (await state(coordinator)).state == S.COMPLETE_ABORT
        assert await coordinator.init_producer_id("t", 30000) == (E.NONE, 1000, 3)
        # The zombie is fenced at whichever request it makes next.
        assert await coordinator.add_partitions("t", 1000, 1, {("a", 0)}) == E.PRODUCER_FENCED
        assert await coordinator.end_transaction("t", 1000, 1, True) == E.PRODUCER_FENCED
        assert coordinator.metrics.aborted == {"client": 0, "timeout": 0, "fenced": 1}
        assert coordinator.metrics.producers_fenced == 3
        coordinator.store.close()

    asyncio.run(scenario())


def test_kip_360_epoch_bumps_and_their_retries(tmp_path) -> None:
    async def scenario():
        coordinator, _ = make(tmp_path)
        await coordinator.init_producer_id("t", 30000)
        assert await coordinator.init_producer_id("t", 30000, (1000, 0)) == (E.NONE, 1000, 1)
        # A retry whose answer was lost names the epoch before: it gets the current one again.
        assert await coordinator.init_producer_id("t", 30000, (1000, 0)) == (E.NONE, 1000, 1)
        assert (await coordinator.init_producer_id("t", 30000, (77, 1)))[0] == E.PRODUCER_FENCED
        assert (await coordinator.init_producer_id("t", 30000, (1000, 5)))[0] == E.PRODUCER_FENCED
        coordinator.store.close()

    asyncio.run(scenario())


def test_an_exhausted_epoch_takes_a_new_producer_id(tmp_path) -> None:
    async def scenario():
        coordinator, _ = make(tmp_path)
        await coordinator.init_producer_id("t", 30000)
        entry = coordinator._entries["t"]
        entry.metadata = TransactionMetadata(**{**entry.metadata.__dict__, "producer_epoch": 32766})
        assert await coordinator.init_producer_id("t", 30000, (1000, 32766)) == (E.NONE, 1001, 0)
        metadata = await state(coordinator)
        assert (metadata.last_producer_id, metadata.last_producer_epoch) == (1000, 32766)
        # A retry naming the old id with its exhausted epoch is not fenced.
        assert (await coordinator.init_producer_id("t", 30000, (1000, 32766)))[0] == E.NONE
        coordinator.store.close()

    asyncio.run(scenario())


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(tmp_path) -> None:
    async def scenario():
        clock = Clock()
        coordinator, markers = make(tmp_path, clock)
        await coordinator.init_producer_id("t", 5000)
        await coordinator.init_producer_id("u", 5000)
        await coordinator.add_partitions("t", 1000, 0, {("a", 0)})
        clock.now += 3000
        await coordinator.add_partitions("u", 1001, 0, {("a", 1)})
        clock.now += 2001
        assert await coordinator.abort_timed_out() == 1
        await settle()
        [marker] = markers.written
        assert (marker.producer_id, marker.producer_epoch, marker.committed) == (1000, 1, False)
        assert (await state(coordinator, "t")).state == S.COMPLETE_ABORT
        assert (await state(coordinator, "u")).state == S.ONGOING
        assert await coordinator.end_transaction("t", 1000, 0, True) == E.PRODUCER_FENCED
        assert coordinator.metrics.aborted["timeout"] == 1
        assert coordinator.metrics.open_transactions() == (1, clock.now - 2001)
        coordinator.store.close()

    asyncio.run(scenario())


def test_idle_transactional_ids_expire(tmp_path) -> None:
    async def scenario():
        clock = Clock()
        coordinator, _ = make(tmp_path, clock)
        await coordinator.init_producer_id("idle", 5000)
        await coordinator.init_producer_id("open", 5000)
        await coordinator.add_partitions("open", 1001, 0, {("a", 0)})
        clock.now += 3_600_001
        assert await coordinator.expire_transactional_ids() == 1
        assert await coordinator.describe("idle") == (E.TRANSACTIONAL_ID_NOT_FOUND, None)
        assert await coordinator.store.load("idle") == (None, -1)
        # A later InitProducerId starts the id afresh with a new producer id.
        assert await coordinator.init_producer_id("idle", 5000) == (E.NONE, 1002, 0)
        coordinator.store.close()

    asyncio.run(scenario())


def test_a_new_coordinator_bumps_the_coordinator_epoch_resumes_the_markers_and_fences_the_old_one(tmp_path) -> None:
    async def scenario():
        store = FileTransactionStore(tmp_path)
        old, old_markers = make(tmp_path, store=store)
        await old.init_producer_id("t", 30000)
        await old.add_partitions("t", 1000, 0, {("a", 0)})
        await old.init_producer_id("u", 30000)
        old_markers.hold = asyncio.Event()
        assert await old.end_transaction("t", 1000, 0, False) == E.NONE
        await settle()
        new, new_markers = make(tmp_path, store=store)
        await new.load_owned()
        await settle()
        [marker] = new_markers.written
        assert (marker.committed, marker.coordinator_epoch) == (False, 1)
        assert (await state(new)).state == S.COMPLETE_ABORT
        assert (await state(new, "u")).coordinator_epoch == 1
        # The old coordinator's writes are refused: it answers NOT_COORDINATOR and forgets the id.
        assert (await old.init_producer_id("u", 30000))[0] == E.NOT_COORDINATOR
        old_markers.hold.set()
        await settle()
        assert old.owned_ids() == []
        assert (await state(new)).state == S.COMPLETE_ABORT
        assert await new.init_producer_id("t", 30000) == (E.NONE, 1000, 1)
        await new.shutdown()
        assert (await new.init_producer_id("t", 30000))[0] == E.NOT_COORDINATOR
        store.close()

    asyncio.run(scenario())


def test_markers_refused_by_a_later_coordinator_leave_the_transaction_prepared(tmp_path) -> None:
    async def scenario():
        coordinator, markers = make(tmp_path)
        markers.result = False
        await coordinator.init_producer_id("t", 30000)
        await coordinator.add_partitions("t", 1000, 0, {("a", 0)})
        assert await coordinator.end_transaction("t", 1000, 0, True) == E.NONE
        await settle()
        assert coordinator.owned_ids() == []
        record, _ = await coordinator.store.load("t")
        coordinator.store.close()
        return record["state"]

    assert asyncio.run(scenario()) == "PrepareCommit"


def test_ids_this_broker_no_longer_coordinates_are_dropped(tmp_path) -> None:
    async def scenario():
        owned = {"t", "u"}
        coordinator, _ = make(tmp_path, owns=lambda t: t in owned)
        await coordinator.init_producer_id("t", 30000)
        await coordinator.init_producer_id("u", 30000)
        owned.discard("u")
        await coordinator.load_owned()
        assert coordinator.owned_ids() == ["t"]
        assert (await coordinator.init_producer_id("u", 30000))[0] == E.NOT_COORDINATOR
        code, listed = coordinator.list()
        assert (code, [m.transactional_id for m in listed]) == (E.NONE, ["t"])
        coordinator.store.close()

    asyncio.run(scenario())


def test_brokers_changing_again_during_a_load_loads_once_more_afterwards_not_beside_it(tmp_path) -> None:
    async def scenario():
        coordinator, _ = make(tmp_path)
        loads = []
        real = coordinator.load_owned

        async def counted() -> None:
            loads.append(len(coordinator._tasks))
            await asyncio.sleep(0.01)
            await real()
        coordinator.load_owned = counted
        for _ in range(5):
            coordinator.brokers_changed()
        await asyncio.sleep(0)
        coordinator.brokers_changed()
        while coordinator._tasks:
            await asyncio.sleep(0.005)
        coordinator.store.close()
        return loads

    assert asyncio.run(scenario()) == [1, 1]


def test_a_request_waits_briefly_for_the_previous_transaction_to_complete(tmp_path) -> None:
    async def scenario():
        coordinator, markers = make(tmp_path)
        await coordinator.init_producer_id("t", 30000)
        await coordinator.add_partitions("t", 1000, 0, {("a", 0)})
        markers.hold = asyncio.Event()
        assert await coordinator.end_transaction("t", 1000, 0, True) == E.NONE
        # Markers done within completion_wait_ms: the next transaction starts at once, no CONCURRENT_TRANSACTIONS.
        asyncio.get_running_loop().call_later(0.02, markers.hold.set)
        assert await coordinator.add_partitions("t", 1000, 0, {("b", 0)}) == E.NONE
        assert (await state(coordinator)).partitions == {("b", 0)}
        # Markers stuck longer: the client is told to retry.
        markers.hold = asyncio.Event()
        assert await coordinator.end_transaction("t", 1000, 0, False) == E.NONE
        started = asyncio.get_running_loop().time()
        assert await coordinator.add_partitions("t", 1000, 0, {("c", 0)}) == E.CONCURRENT_TRANSACTIONS
        assert asyncio.get_running_loop().time() - started >= 0.09
        asyncio.get_running_loop().call_later(0.01, markers.hold.set)
        assert await coordinator.end_transaction("t", 1000, 0, False) == E.NONE
        assert (await state(coordinator)).state == S.COMPLETE_ABORT
        coordinator.store.close()

    asyncio.run(scenario())
