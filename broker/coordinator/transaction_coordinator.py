"""TransactionCoordinator: Kafka's transaction coordinator for the transactional ids this broker coordinates.

It runs on the event loop. Every transition is written to the store (conditional on the record's version) before
the request that caused it is answered; while a write or a marker round is in flight for an id, other requests for
it get CONCURRENT_TRANSACTIONS, as Kafka's pending state gives them. Ending a transaction writes PrepareCommit or
PrepareAbort, answers, has the TransactionMarkerChannelManager write the markers, then writes CompleteCommit or
CompleteAbort. A broker that loads an id (on start-up, when the brokers change, or on its first request) bumps the
id's coordinator epoch in the store, which fences the previous coordinator's writes and markers, and resumes the
markers of a transaction it finds prepared.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Callable

from broker.config import KafkaConfig
from broker.coordinator.coordinator_placement import GROUP_METADATA_TOPIC, partition_for
from broker.coordinator.transaction_marker_channel import (
    MarkerChannelClosed,
    TransactionMarker,
    TransactionMarkerChannelManager,
    marker_units,
)
from broker.coordinator.transaction_metadata import (
    COMPLETED_STATES,
    NO_PRODUCER_EPOCH,
    PREPARE_STATES,
    MAX_EPOCH,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from broker.coordinator.transaction_metrics import TransactionCoordinatorMetrics
from broker.coordinator.transaction_store import NO_VERSION, TransactionFenced, TransactionStore, TransactionStoreError
from broker.metadata import ProducerIdManager, ProducerIdUnavailable
from pipeline.printable import printable
from pipeline.protocol.errors import ErrorCode
from pipeline.testing_faults import Faults

log = logging.getLogger(__name__)

S = TransactionState
_OPEN = frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT})


@dataclass(frozen=True)
class TransactionConfig:
    """The broker's transaction.* settings the coordinator uses."""

    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    offsets_partitions: int = 50
    store_retry_backoff_ms: int = 100
    # How long a request finding the previous transaction's markers in flight waits for its completion before it
    # answers CONCURRENT_TRANSACTIONS (the client would retry after 20 ms or more; this saves it the round).
    completion_wait_ms: int = 100

    # testing.pause.at (tests only: see TRANSACTION_PAUSE_POINTS)
    faults: Faults = Faults()

    @classmethod
    def from_config(cls, config: KafkaConfig) -> TransactionConfig:
        return cls(config["transaction.max.timeout.ms"], config["transactional.id.expiration.ms"],
                   config["offsets.topic.num.partitions"], faults=Faults.of(config))


class _Entry:
    """A loaded id: its metadata, the version of its stored record, what is in flight for it."""

    __slots__ = ("metadata", "version", "pending", "markers")

    def __init__(self, metadata: TransactionMetadata, version: int) -> None:
        self.metadata = metadata
        self.version = version
        # The state being written (Kafka's pendingState); requests meanwhile get CONCURRENT_TRANSACTIONS.
        self.pending: TransactionState | None = None
        self.markers: asyncio.Task | None = None


class TransactionCoordinator:
    """Answers the transaction requests of the ids ``owns`` says this broker coordinates."""

    def __init__(self, store: TransactionStore, config: TransactionConfig, owns: Callable[[str], bool],
                 producer_ids: ProducerIdManager, markers: TransactionMarkerChannelManager,
                 metrics: TransactionCoordinatorMetrics | None = None,
                 time_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.store = store
        self.config = config
        self._owns = owns
        self._producer_ids = producer_ids
        self.markers = markers
        self.metrics = metrics if metrics is not None else TransactionCoordinatorMetrics()
        self.metrics.open_transactions = self._open_transactions
        self.metrics.now_ms = time_ms
        self._now = time_ms
        self._entries: dict[str, _Entry] = {}
        # Ids being read from the store or created: requests for them meanwhile are told to retry.
        self._loading: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._active = True
        self._load_wanted = True
        # Whether load_owned is reading the store (ListTransactions answers COORDINATOR_LOAD_IN_PROGRESS).
        self._loading_all = False
        self._load_task: asyncio.Task | None = None
        self._load_again = False

    # -- loading -----------------------------------------------------------------------------------

    def _open_transactions(self) -> tuple[int, int | None]:
        starts = [e.metadata.start_time_ms for e in self._entries.values() if e.metadata.state in _OPEN]
        return len(starts), min(starts, default=None)

    async def _get(self, transactional_id: str) -> _Entry | int | None:
        """The id's entry (loaded now if stored), None when it has none, or the error code to answer."""
        if not self._active or not self._owns(transactional_id):
            return ErrorCode.NOT_COORDINATOR
        entry = self._entries.get(transactional_id)
        if entry is not None:
            return entry
        if transactional_id in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        self._loading.add(transactional_id)
        try:
            record, version = await self.store.load(transactional_id)
            if record is None:
                return None if version == NO_VERSION else ErrorCode.COORDINATOR_NOT_AVAILABLE
            return await self._take_over(transactional_id, record, version)
        except TransactionStoreError as exc:
            log.warning("transactional id %s: store unavailable: %s", printable(transactional_id), exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:
            self._loading.discard(transactional_id)

    async def _take_over(self, transactional_id: str, record: dict, version: int) -> _Entry | int:
        """Load a stored id with a bumped coordinator epoch and resume its markers if it was prepared."""
        try:
            metadata = TransactionMetadata.from_record(transactional_id, record)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("transactional id %s: unreadable record (%s); not loaded", printable(transactional_id), exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        metadata = replace(metadata, coordinator_epoch=metadata.coordinator_epoch + 1)
        try:
            version = await self.store.store(transactional_id, metadata.to_record(), version)
        except TransactionFenced:
            return ErrorCode.NOT_COORDINATOR
        if not self._active or not self._owns(transactional_id) or transactional_id in self._entries:
            return ErrorCode.NOT_COORDINATOR
        entry = self._entries[transactional_id] = _Entry(metadata, version)
        log.info("transactional id %s loaded in state %s with coordinator epoch %d", printable(transactional_id),
                 metadata.state.value, metadata.coordinator_epoch)
        if metadata.state in PREPARE_STATES:
            self._start_markers(transactional_id, entry)
        return entry

    async def load_owned(self) -> None:
        """Load every stored id this broker coordinates now and drop those it does not (start-up, brokers
        changed); an id that fails to load is tried again at the next ``abort_timed_out`` round."""
        self._load_wanted = False
        for transactional_id in [t for t in self._entries if not self._owns(t)]:
            self._unload(transactional_id)
        self._loading_all = True
        try:
            await self._load_stored()
        finally:
            self._loading_all = False

    async def _load_stored(self) -> None:
        try:
            stored = await self.store.load_all()
        except TransactionStoreError as exc:
            log.warning("loading transactional ids failed: %s; retrying later", exc)
            self._load_wanted = True
            return
        for transactional_id, (record, version) in stored.items():
            if not self._active:
                return
            if transactional_id in self._entries or transactional_id in self._loading or \
                    not self._owns(transactional_id):
                continue
            self._loading.add(transactional_id)
            try:
                await self._take_over(transactional_id, record, version)
            except TransactionStoreError as exc:
                log.warning("transactional id %s: loading failed: %s", printable(transactional_id), exc)
                self._load_wanted = True
            finally:
                self._loading.discard(transactional_id)

    def _unload(self, transactional_id: str) -> None:
        entry = self._entries.pop(transactional_id, None)
        if entry is not None and entry.markers is not None:
            entry.markers.cancel()

    def owned_ids(self) -> list[str]:
        """The ids loaded here (for tests and ListTransactions)."""
        return sorted(self._entries)

    # -- writes ------------------------------------------------------------------------------------

    async def _write(self, transactional_id: str, entry: _Entry, metadata: TransactionMetadata,
                     pending: TransactionState | None = None) -> int:
        """Store ``metadata`` as the id's new state; the error code to answer."""
        entry.pending = pending or metadata.state
        try:
            version = await self.store.store(transactional_id, metadata.to_record(), entry.version)
        except TransactionFenced:
            log.info("transactional id %s: another coordinator took it over", printable(transactional_id))
            if self._entries.get(transactional_id) is entry:
                self._unload(transactional_id)
            return ErrorCode.NOT_COORDINATOR
        except TransactionStoreError as exc:
            log.warning("transactional id %s: writing %s failed: %s", printable(transactional_id),
                        metadata.state.value, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:
            entry.pending = None
        entry.metadata, entry.version = metadata, version
        return ErrorCode.NONE

    async def _new_producer_id(self) -> int:
        producer_id = self._producer_ids.next_producer_id()
        return producer_id if isinstance(producer_id, int) else await producer_id

    # -- InitProducerId ----------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for InitProducerId with a transactional id; ``expected`` is v3+'s
        (ProducerId, ProducerEpoch) when the producer has them (KIP-360). PRODUCER_FENCED is the caller's to map."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        found = await self._get(transactional_id)
        if isinstance(found, int):
            return found, -1, -1
        if found is None:
            return await self._create(transactional_id, timeout_ms)
        if await self._completed_meanwhile(found):
            return await self.init_producer_id(transactional_id, timeout_ms, expected)
        entry, metadata = found, found.metadata
        if entry.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if expected is not None and not _valid_expected_producer(metadata, *expected):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if metadata.state in PREPARE_STATES:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if metadata.state == S.ONGOING:
            # Abort it first with a bumped epoch; the client retries and gets an epoch bumped once more.
            code = await self._fence_and_abort(transactional_id, entry, "fenced")
            return code if code != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        now = self._now()
        entry.pending = S.EMPTY
        try:
            if metadata.epoch_exhausted:
                producer_id = await self._new_producer_id()
                new = metadata.transition_to(
                    S.EMPTY, producer_id=producer_id, last_producer_id=metadata.producer_id, producer_epoch=0,
                    last_producer_epoch=metadata.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                    timeout_ms=timeout_ms, partitions=frozenset(), groups=frozenset(), start_time_ms=-1,
                    last_update_time_ms=now)
            else:
                epochs = _bumped_epochs(metadata, None if expected is None else expected[1])
                if epochs is None:
                    return ErrorCode.PRODUCER_FENCED, -1, -1
                new = metadata.transition_to(
                    S.EMPTY, producer_epoch=epochs[0], last_producer_epoch=epochs[1], timeout_ms=timeout_ms,
                    partitions=frozenset(), groups=frozenset(), start_time_ms=-1, last_update_time_ms=now)
        except ProducerIdUnavailable as exc:
            log.warning("no producer id to hand out: %s", exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        finally:
            entry.pending = None
        code = await self._write(transactional_id, entry, new)
        if code != ErrorCode.NONE:
            return code, -1, -1
        if expected is None and metadata.producer_epoch != NO_PRODUCER_EPOCH:
            self.metrics.producers_fenced += 1
        return ErrorCode.NONE, new.producer_id, new.producer_epoch

    async def _create(self, transactional_id: str, timeout_ms: int) -> tuple[int, int, int]:
        self._loading.add(transactional_id)
        try:
            producer_id = await self._new_producer_id()
            metadata = TransactionMetadata(transactional_id, producer_id, producer_epoch=0, timeout_ms=timeout_ms,
                                           last_update_time_ms=self._now())
            version = await self.store.store(transactional_id, metadata.to_record(), NO_VERSION)
        except ProducerIdUnavailable as exc:
            log.warning("no producer id to hand out: %s", exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        except TransactionFenced:
            return ErrorCode.NOT_COORDINATOR, -1, -1
        except TransactionStoreError as exc:
            log.warning("transactional id %s: creating it failed: %s", printable(transactional_id), exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        finally:
            self._loading.discard(transactional_id)
        if not self._active or not self._owns(transactional_id):
            return ErrorCode.NOT_COORDINATOR, -1, -1
        self._entries[transactional_id] = _Entry(metadata, version)
        return ErrorCode.NONE, producer_id, 0

    # -- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: set[TopicPartition], groups: frozenset[str] = frozenset()) -> int:
        """Add ``partitions`` (and the offsets of ``groups``) to the producer's transaction; an error code."""
        found = await self._checked(transactional_id, producer_id, producer_epoch)
        if isinstance(found, int):
            return found
        entry, metadata = found, found.metadata
        if metadata.state in PREPARE_STATES:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state == S.ONGOING and partitions <= metadata.partitions and groups <= metadata.groups:
            return ErrorCode.NONE
        now = self._now()
        new = metadata.transition_to(
            S.ONGOING, partitions=metadata.partitions | frozenset(partitions), groups=metadata.groups | groups,
            start_time_ms=metadata.start_time_ms if metadata.state == S.ONGOING else now, last_update_time_ms=now)
        return await self._write(transactional_id, entry, new)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> int:
        """Add the offsets partition of ``group_id`` to the transaction (Kafka's AddOffsetsToTxn)."""
        partition = (GROUP_METADATA_TOPIC, self.offsets_partition(group_id))
        return await self.add_partitions(transactional_id, producer_id, producer_epoch, {partition},
                                         frozenset({group_id}))

    def offsets_partition(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_partitions)

    async def _checked(self, transactional_id: str, producer_id: int, producer_epoch: int) -> _Entry | int:
        """The entry of a request naming the producer, or the error code: the id must map to ``producer_id`` at
        ``producer_epoch`` with nothing in flight."""
        found = await self._get(transactional_id)
        if isinstance(found, int):
            return found
        if found is None or found.metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if found.metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if await self._completed_meanwhile(found):
            return await self._checked(transactional_id, producer_id, producer_epoch)
        if found.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return found

    async def _completed_meanwhile(self, entry: _Entry) -> bool:
        """Whether the entry's prepared transaction, its markers in flight, completed within completion_wait_ms
        (the request then starts over on the completed state)."""
        task = entry.markers
        if task is None or task.done() or entry.metadata.state not in PREPARE_STATES:
            return False
        done, _ = await asyncio.wait({task}, timeout=self.config.completion_wait_ms / 1000)
        return bool(done)

    # -- EndTxn --------------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              committed: bool) -> int:
        """Commit or abort the producer's transaction (Kafka's endTransaction); answered once PrepareCommit or
        PrepareAbort is stored, the markers and the completion follow."""
        found = await self._checked(transactional_id, producer_id, producer_epoch)
        if isinstance(found, int):
            return found
        entry, metadata = found, found.metadata
        state = metadata.state
        if state == S.ONGOING:
            target = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
            code = await self._write(transactional_id, entry,
                                     metadata.transition_to(target, last_update_time_ms=self._now()))
            if code == ErrorCode.NONE:
                self.config.faults.pause("transaction-prepared")
                if committed:
                    self.metrics.committed += 1
                else:
                    self.metrics.aborted["client"] += 1
                self._start_markers(transactional_id, entry)
            return code
        if state == (S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT):
            return ErrorCode.NONE
        if state == (S.PREPARE_COMMIT if committed else S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        log.info("transactional id %s: EndTxn(%s) in state %s", printable(transactional_id),
                 "commit" if committed else "abort", state.value)
        return ErrorCode.INVALID_TXN_STATE

    async def _fence_and_abort(self, transactional_id: str, entry: _Entry, reason: str) -> int:
        """Abort an Ongoing transaction with the producer's epoch bumped (PrepareEpochFence, then PrepareAbort):
        the producer that opened it is fenced at its next request."""
        metadata = entry.metadata
        fenced = metadata.transition_to(S.PREPARE_EPOCH_FENCE)
        epoch = metadata.producer_epoch + 1 if metadata.producer_epoch < MAX_EPOCH else metadata.producer_epoch
        new = fenced.transition_to(S.PREPARE_ABORT, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
                                   last_update_time_ms=self._now())
        code = await self._write(transactional_id, entry, new, pending=S.PREPARE_EPOCH_FENCE)
        if code == ErrorCode.NONE:
            self.metrics.aborted[reason] += 1
            self.metrics.producers_fenced += 1
            log.info("transactional id %s: transaction of producer %d aborted (%s), epoch bumped to %d",
                     printable(transactional_id), metadata.producer_id, reason, epoch)
            self._start_markers(transactional_id, entry)
        return code

    # -- markers and completion ----------------------------------------------------------------------

    def _start_markers(self, transactional_id: str, entry: _Entry) -> None:
        task = asyncio.get_running_loop().create_task(self._complete(transactional_id, entry))
        entry.markers = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, transactional_id: str, entry: _Entry) -> None:
        """Write the markers of the prepared transaction, then its completion (retried until stored, fenced or
        unloaded)."""
        prepared = entry.metadata
        committed = prepared.state == S.PREPARE_COMMIT
        marker = TransactionMarker(prepared.producer_id, prepared.producer_epoch, committed,
                                   prepared.coordinator_epoch,
                                   marker_units(prepared.partitions, prepared.groups, GROUP_METADATA_TOPIC,
                                                self.offsets_partition))
        try:
            written = await self.markers.write(marker)
        except MarkerChannelClosed:
            return
        if not written:
            if self._entries.get(transactional_id) is entry:
                self._unload(transactional_id)
            return
        complete = prepared.transition_to(S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT,
                                          partitions=frozenset(), groups=frozenset(),
                                          last_update_time_ms=self._now())
        backoff = self.config.store_retry_backoff_ms / 1000
        while self._active and self._entries.get(transactional_id) is entry and entry.metadata is prepared:
            code = await self._write(transactional_id, entry, complete)
            if code != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    # -- periodic work -------------------------------------------------------------------------------

    async def abort_timed_out(self) -> int:
        """Abort the Ongoing transactions older than their timeout, fencing their producers (Kafka's
        abortTimedOutTransactions); the number aborted. Also retries loading ids that failed to load."""
        if self._load_wanted:
            await self.load_owned()
        now = self._now()
        expired = [(t, e) for t, e in self._entries.items() if e.metadata.state == S.ONGOING and e.pending is None
                   and e.metadata.start_time_ms + e.metadata.timeout_ms < now]
        aborted = 0
        for transactional_id, entry in expired:
            if self._entries.get(transactional_id) is entry and entry.pending is None and \
                    entry.metadata.state == S.ONGOING:
                aborted += await self._fence_and_abort(transactional_id, entry, "timeout") == ErrorCode.NONE
        return aborted

    async def expire_transactional_ids(self) -> int:
        """Remove the ids idle in a completed state longer than transactional.id.expiration.ms (Dead); how many."""
        deadline = self._now() - self.config.id_expiration_ms
        idle = [(t, e) for t, e in self._entries.items() if e.metadata.state in COMPLETED_STATES
                and e.pending is None and e.metadata.last_update_time_ms < deadline]
        removed = 0
        for transactional_id, entry in idle:
            if self._entries.get(transactional_id) is not entry or entry.pending is not None:
                continue
            entry.metadata.transition_to(S.DEAD)
            entry.pending = S.DEAD
            try:
                await self.store.delete(transactional_id, entry.version)
            except TransactionStoreError as exc:
                log.warning("transactional id %s: expiring it failed: %s", printable(transactional_id), exc)
                entry.pending = None
                continue
            self._entries.pop(transactional_id, None)
            removed += 1
            log.info("transactional id %s expired", printable(transactional_id))
        return removed

    # -- Describe and List ---------------------------------------------------------------------------

    async def describe(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        found = await self._get(transactional_id)
        if isinstance(found, int):
            return found, None
        if found is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, found.metadata

    def list(self) -> tuple[int, list[TransactionMetadata]]:
        if not self._active:
            return ErrorCode.NOT_COORDINATOR, []
        if self._loading_all:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        return ErrorCode.NONE, [self._entries[t].metadata for t in sorted(self._entries)]

    # -- membership ----------------------------------------------------------------------------------

    def brokers_changed(self) -> None:
        """Drop the ids another broker coordinates now and load those this broker took over (once more after the
        load in progress, if any, rather than beside it)."""
        if not self._active:
            return
        self._load_again = True
        if self._load_task is None or self._load_task.done():
            self._load_task = task = asyncio.get_running_loop().create_task(self._load_while_changed())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _load_while_changed(self) -> None:
        while self._load_again and self._active:
            self._load_again = False
            await self.load_owned()

    async def shutdown(self) -> None:
        """Stop answering (NOT_COORDINATOR) and stop marker work: the next coordinator of each id resumes the
        prepared transactions from the store."""
        self._active = False
        self.markers.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        self._entries.clear()


def _valid_expected_producer(metadata: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's isValidProducerId for InitProducerId v3+: the producer's (id, epoch) is this id's current one, its
    metadata was just created, or it retries after a rotation whose answer it never got."""
    return (metadata.producer_epoch == NO_PRODUCER_EPOCH or producer_id == metadata.producer_id
            or (producer_id == metadata.last_producer_id and is_epoch_exhausted(epoch)))


def _bumped_epochs(metadata: TransactionMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """Kafka's prepareIncrementProducerEpoch: (new epoch, new last epoch), or None when the producer is fenced."""
    bumped = metadata.producer_epoch + 1
    if expected_epoch is None:
        return bumped, NO_PRODUCER_EPOCH
    if metadata.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == metadata.producer_epoch:
        return bumped, metadata.producer_epoch
    if expected_epoch == metadata.last_producer_epoch:
        return metadata.producer_epoch, metadata.last_producer_epoch
    return None
