"""Idempotent and transactional producer bookkeeping: per producer id, its epoch, its last five
batches, the first offset of its open transaction and the last coordinator epoch of its markers.

This is how the log recognises a retried batch (not appended twice) and a gap in a producer's
sequence numbers (rejected). A producer whose batches retention deleted is forgotten (unless its
transaction is open) and, as in Kafka, accepted again at whatever sequence it has reached.

The ongoing transactions, by first offset, give the partition's first unstable offset; a transaction a
marker completed stays unstable until the high watermark passes its marker (Kafka's unreplicated
transactions), so read_committed readers never see a commit a new leader might not have. The state is
rebuilt at load from a snapshot file, written at every segment roll and at close, plus a scan of the
batches written after it.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from pathlib import Path
from typing import NamedTuple

from pipeline.durable_file import write_atomically
from broker.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)

MAX_BATCHES_PER_PRODUCER = 5
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_NAME = re.compile(r"([0-9]{20})\.snapshot")
_SNAPSHOT_VERSION = 2
_READABLE_SNAPSHOT_VERSIONS = (1, 2)
INT32_MAX = 0x7FFFFFFF
INT64_MAX = 0x7FFFFFFFFFFFFFFF


class BatchMetadata(NamedTuple):
    """The sequence range and offset range of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended in this partition: its first data offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateEntry:
    """One producer id's epoch, the metadata of its most recent batches, the first offset of its open
    transaction here (-1: none; Kafka's currentTxnFirstOffset) and its markers' last coordinator epoch."""

    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "current_txn_first_offset", "marker_offset")

    def __init__(self, producer_id: int, epoch: int, batches: deque[BatchMetadata] | None = None,
                 coordinator_epoch: int = -1, current_txn_first_offset: int = -1, marker_offset: int = -1) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = batches if batches is not None else deque(maxlen=MAX_BATCHES_PER_PRODUCER)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset
        self.marker_offset = marker_offset

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        """The last offset of the producer's last data batch (-1: none known)."""
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset(self) -> int:
        """The producer's last offset in the log: its last batch or its last marker."""
        return max(self.batches[-1].last_offset if self.batches else -1, self.marker_offset)

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.epoch, deque(self.batches, maxlen=MAX_BATCHES_PER_PRODUCER),
                                  self.coordinator_epoch, self.current_txn_first_offset, self.marker_offset)

    def add(self, epoch: int, meta: BatchMetadata) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(meta)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (sequences wrap at 2^31-1 to 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """The idempotent and transactional producer state of one partition (Kafka's ProducerStateManager)."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id of every open transaction (Kafka's ongoingTxns).
        self.ongoing: dict[int, int] = {}
        # first offset -> transactions completed by a marker the high watermark has not passed yet.
        self.unreplicated: dict[int, CompletedTxn] = {}

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open or unreplicated transaction; None when there is none."""
        if not self.ongoing and not self.unreplicated:
            return None
        return min(min(self.ongoing, default=INT64_MAX), min(self.unreplicated, default=INT64_MAX))

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker is below ``high_watermark`` (replicated)."""
        if self.unreplicated:
            for first, txn in list(self.unreplicated.items()):
                if txn.last_offset < high_watermark:
                    del self.unreplicated[first]

    # ----------------------------------------------------------------------- validate and commit

    def check(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        staged: dict[int, ProducerStateEntry],
        transactional: bool = False,
    ) -> BatchMetadata | None:
        """Validate one batch against the state plus ``staged`` (earlier batches of the same append).

        Returns the original batch's metadata if this batch is a retried duplicate; otherwise
        records the batch in ``staged`` (nothing changes until :meth:`commit`); a transactional batch
        opens its producer's transaction unless it is open. Raises InvalidProducerEpochError for an
        older epoch, OutOfOrderSequenceError for a gap, or for a known producer's new epoch not
        starting at 0, and InvalidTxnStateError for a non-transactional batch inside an open transaction.
        """
        entry = staged.get(producer_id)
        if entry is None:
            entry = self.producers.get(producer_id)
        if entry is not None:
            duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
            if duplicate is not None:
                return duplicate
            if epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {producer_id} sent epoch {epoch}, older than the current epoch {entry.epoch}"
                )
            if not transactional and entry.current_txn_first_offset >= 0:
                raise InvalidTxnStateError(
                    f"producer {producer_id} sent a non-transactional batch inside its open transaction")
        # A producer the log keeps no state of (retention deleted all its batches) is accepted at any
        # sequence, so that it carries on where it was (Kafka since 2.4, KIP-360).
        if entry is not None:
            if epoch != entry.epoch or not entry.batches:
                if first_seq != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {producer_id} epoch {epoch} must start at sequence 0, got {first_seq}"
                    )
            elif not in_sequence(entry.last_seq, first_seq):
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} sent sequence {first_seq} after {entry.last_seq}"
                )
        if producer_id not in staged:
            entry = entry.copy() if entry is not None else ProducerStateEntry(producer_id, epoch)
            staged[producer_id] = entry
        entry.add(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
        return None

    def commit(self, staged: dict[int, ProducerStateEntry]) -> None:
        """Make the batches staged by :meth:`check` part of the state (after the write succeeded)."""
        self.producers.update(staged)
        for pid, entry in staged.items():
            if entry.current_txn_first_offset >= 0:
                self.ongoing[entry.current_txn_first_offset] = pid

    def replay(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int, last_offset: int,
               transactional: bool = False) -> None:
        """Apply a batch read back from the log, without validation (state rebuild at load, followers)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        entry.add(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[first_offset] = producer_id

    # ---------------------------------------------------------------------------------- markers

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Refuse a commit or abort marker from a stale producer epoch (InvalidProducerEpochError) or a
        stale coordinator (TransactionCoordinatorFencedError), as Kafka's appendEndTxnMarker does. A
        newer epoch is accepted: the coordinator bumped it to fence the producer."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"a marker for producer {producer_id} carries epoch {epoch}, older than its epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"a marker for producer {producer_id} comes from coordinator epoch {coordinator_epoch}, older "
                f"than {entry.coordinator_epoch}")

    def complete_txn(self, producer_id: int, epoch: int, coordinator_epoch: int, committed: bool,
                     marker_offset: int) -> CompletedTxn | None:
        """Apply a (checked or replayed) marker at ``marker_offset``: the producer's transaction here
        ends; returns it, or None when the producer had no data in it here."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.marker_offset = marker_offset
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        self.ongoing.pop(first, None)
        txn = CompletedTxn(producer_id, first, marker_offset, not committed)
        self.unreplicated[first] = txn
        return txn

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """The partition's last stable offset once ``txn`` (completed) is replicated, for its index
        entry: the first offset of the earliest other open transaction, else the marker's next offset."""
        return min(self.ongoing, default=txn.last_offset + 1)

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers none of whose recent batches is still in the log and whose transaction is
        not open; drop older snapshots."""
        gone = [pid for pid, entry in self.producers.items()
                if entry.last_offset < log_start_offset and entry.current_txn_first_offset < 0]
        for pid in gone:
            del self.producers[pid]
        for first in [first for first, txn in self.unreplicated.items() if txn.last_offset < log_start_offset]:
            del self.unreplicated[first]
        for offset, path in self.list_snapshots():
            if offset < log_start_offset:
                path.unlink(missing_ok=True)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    # -------------------------------------------------------------------------------- snapshots

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def list_snapshots(self) -> list[tuple[int, Path]]:
        """(offset, path) of every snapshot file in the partition directory, oldest first."""
        found = []
        for name in os.listdir(self.dir):
            match = _SNAPSHOT_NAME.fullmatch(name)
            if match:
                found.append((int(match.group(1)), self.dir / name))
        found.sort()
        return found

    def take_snapshot(self, offset: int, durable: bool = True) -> Path:
        """Write the state as of ``offset`` (the log end offset) to ``<offset>.snapshot``; return its path.

        ``durable=False`` leaves syncing the file and the directory to the caller."""
        body = {
            "version": _SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [
                [entry.producer_id, entry.epoch, [list(meta) for meta in entry.batches], entry.coordinator_epoch,
                 entry.current_txn_first_offset, entry.marker_offset]
                for entry in self.producers.values()
                if entry.batches or entry.current_txn_first_offset >= 0 or entry.coordinator_epoch >= 0
            ],
        }
        path = self.snapshot_path(offset)
        write_atomically(path, json.dumps(body, separators=(",", ":")).encode(), durable=durable)
        return path

    def load_latest_snapshot(self, max_offset: int, load_at_most: int | None = None) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset`` (and ``load_at_most``, when
        the scan after it must start earlier); return its offset.

        Snapshots above ``max_offset`` (written before a truncation) are deleted. Returns None, with
        an empty state, when there is no usable snapshot. Version 1 snapshots (no transactions) load.
        """
        self.clear()
        bound = max_offset if load_at_most is None else min(max_offset, load_at_most)
        for offset, path in reversed(self.list_snapshots()):
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            if offset > bound:
                continue
            try:
                body = json.loads(path.read_text())
                if body["version"] not in _READABLE_SNAPSHOT_VERSIONS or body["offset"] != offset:
                    raise ValueError(f"unexpected snapshot header in {path}")
                producers = {}
                for producer_id, epoch, batches, *txn in body["producers"]:
                    entry = ProducerStateEntry(producer_id, epoch, None, *txn)
                    for meta in batches:
                        entry.batches.append(BatchMetadata(*meta))
                    producers[producer_id] = entry
            except (OSError, ValueError, KeyError, TypeError):
                continue
            self.producers = producers
            self.ongoing = {e.current_txn_first_offset: pid for pid, e in producers.items()
                            if e.current_txn_first_offset >= 0}
            return offset
        return None
