"""Idempotent-producer bookkeeping: per producer id, its epoch and its last five batches.

This is how the log recognises a retried batch (not appended twice) and a gap in a producer's
sequence numbers (rejected). A producer whose batches retention deleted is forgotten and, as in
Kafka, accepted again at whatever sequence it has reached. The state is rebuilt at load from a
snapshot file, written at every segment roll and at close, plus a scan of the batch headers
written after it.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from pathlib import Path
from typing import NamedTuple

from pipeline.durable_file import write_atomically
from broker.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError

MAX_BATCHES_PER_PRODUCER = 5
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_NAME = re.compile(r"([0-9]{20})\.snapshot")
_SNAPSHOT_VERSION = 1
INT32_MAX = 0x7FFFFFFF


class BatchMetadata(NamedTuple):
    """The sequence range and offset range of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class ProducerStateEntry:
    """One producer id's epoch and the metadata of its most recent batches."""

    __slots__ = ("producer_id", "epoch", "batches")

    def __init__(self, producer_id: int, epoch: int, batches: deque[BatchMetadata] | None = None) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = batches if batches is not None else deque(maxlen=MAX_BATCHES_PER_PRODUCER)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.epoch, deque(self.batches, maxlen=MAX_BATCHES_PER_PRODUCER))

    def add(self, epoch: int, meta: BatchMetadata) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(meta)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (sequences wrap at 2^31-1 to 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """The idempotent producer state of one partition (Kafka's ProducerStateManager)."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.producers: dict[int, ProducerStateEntry] = {}

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
    ) -> BatchMetadata | None:
        """Validate one batch against the state plus ``staged`` (earlier batches of the same append).

        Returns the original batch's metadata if this batch is a retried duplicate; otherwise
        records the batch in ``staged`` (nothing changes until :meth:`commit`). Raises
        InvalidProducerEpochError for an older epoch and OutOfOrderSequenceError for a gap, or for a
        known producer's new epoch not starting at 0.
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
        return None

    def commit(self, staged: dict[int, ProducerStateEntry]) -> None:
        """Make the batches staged by :meth:`check` part of the state (after the write succeeded)."""
        self.producers.update(staged)

    def replay(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int, last_offset: int) -> None:
        """Apply a batch read back from the log, without validation (state rebuild at load)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        entry.add(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset))

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers none of whose recent batches is still in the log; drop older snapshots."""
        gone = [pid for pid, entry in self.producers.items() if entry.last_offset < log_start_offset]
        for pid in gone:
            del self.producers[pid]
        for offset, path in self.list_snapshots():
            if offset < log_start_offset:
                path.unlink(missing_ok=True)

    def clear(self) -> None:
        self.producers.clear()

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
                [entry.producer_id, entry.epoch, [list(meta) for meta in entry.batches]]
                for entry in self.producers.values()
                if entry.batches
            ],
        }
        path = self.snapshot_path(offset)
        write_atomically(path, json.dumps(body, separators=(",", ":")).encode(), durable=durable)
        return path

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset``; return its offset.

        Snapshots above ``max_offset`` (written before a truncation) are deleted. Returns None, with
        an empty state, when there is no usable snapshot.
        """
        self.producers.clear()
        for offset, path in reversed(self.list_snapshots()):
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                body = json.loads(path.read_text())
                if body["version"] != _SNAPSHOT_VERSION or body["offset"] != offset:
                    raise ValueError(f"unexpected snapshot header in {path}")
                producers = {}
                for producer_id, epoch, batches in body["producers"]:
                    entry = ProducerStateEntry(producer_id, epoch)
                    for meta in batches:
                        entry.batches.append(BatchMetadata(*meta))
                    producers[producer_id] = entry
            except (OSError, ValueError, KeyError, TypeError):
                continue
            self.producers = producers
            return offset
        return None
