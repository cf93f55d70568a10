"""The aborted-transactions index of one segment, a ``.txnindex`` file in Kafka's format (TransactionIndex).

One entry per transaction whose abort marker landed in the segment and that had data in the partition:
version int16 (0), producer id int64, first offset int64, last offset int64 (the marker's offset) and the
last stable offset int64 the partition had once the transaction was complete; 34 bytes each, in marker
order. read_committed fetches collect from these files the aborted transactions overlapping what they
read (Kafka's collectAbortedTxns), which consumers use to skip aborted batches. The file exists only once
a first entry is written. Entries are read lazily and kept in memory (aborts are few).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from broker.log.errors import CorruptRecordError

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
_VERSION = 0


class AbortedTxn(NamedTuple):
    """One aborted transaction of the partition (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The ``<base>.txnindex`` file of one segment: its aborted transactions, oldest marker first."""

    __slots__ = ("path", "_entries", "_fd")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        self._fd = -1

    def entries(self) -> list[AbortedTxn]:
        """Every entry (read from the file on first use); CorruptRecordError when the file is damaged."""
        if self._entries is None:
            self._entries = _read_entries(self.path)
        return self._entries

    def is_consistent(self) -> bool:
        """Whether the file is missing or whole entries of version 0 with offsets in order."""
        try:
            entries = self.entries()
        except CorruptRecordError:
            return False
        return all(e.first_offset <= e.last_offset for e in entries) and all(
            a.last_offset < b.last_offset for a, b in zip(entries, entries[1:]))

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry at the end of the file (created by the first one)."""
        entries = self.entries()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} is not after "
                             f"the last entry's end {entries[-1].last_offset}")
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, _ENTRY.pack(_VERSION, *txn))
        entries.append(txn)

    def collect(self, start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping [start, upper), and whether no later segment can hold more: an entry
        whose last stable offset reached ``upper`` proves every transaction begun below it is complete."""
        found = []
        for txn in self.entries():
            if txn.last_offset >= start and txn.first_offset < upper:
                found.append(txn)
            if txn.last_stable_offset >= upper:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (the log is cut there)."""
        entries = self.entries()
        keep = sum(1 for e in entries if e.last_offset < offset)
        if keep == len(entries):
            return
        del entries[keep:]
        if self.path.exists():
            os.truncate(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry and the file (the index is being rebuilt)."""
        self.close()
        self.path.unlink(missing_ok=True)
        self._entries = []

    def open_for_sync(self) -> int | None:
        """A new descriptor of the file for an fsync (the caller closes it), None when it does not exist."""
        try:
            return os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None

    def rename(self, new_path: Path) -> bool:
        """Rename the file if it exists; the index follows the new name either way. Whether a file moved."""
        moved = True
        try:
            os.rename(self.path, new_path)
        except FileNotFoundError:
            moved = False
        self.path = new_path
        return moved

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _read_entries(path: Path) -> list[AbortedTxn]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(data) % ENTRY_SIZE:
        raise CorruptRecordError(f"{path}: {len(data)} bytes are not whole {ENTRY_SIZE}-byte entries")
    entries = []
    for version, *fields in _ENTRY.iter_unpack(data):
        if version != _VERSION:
            raise CorruptRecordError(f"{path}: entry of unknown version {version}")
        entries.append(AbortedTxn(*fields))
    return entries
