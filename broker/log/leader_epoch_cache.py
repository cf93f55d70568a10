"""The leader epoch cache of one partition: which leader epoch started at which offset (KIP-101).

Kept in ``<partition dir>/leader-epoch-checkpoint`` in Kafka's format: a version line "0", a count
line, then one "epoch start_offset" line per entry, oldest first. Every change rewrites the file
atomically and durably. A follower asks the leader for the end offset of its latest epoch
(OffsetForLeaderEpoch) and truncates its log there, instead of at its high watermark.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import NamedTuple

from pipeline.durable_file import write_atomically

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Epoch -> start offset entries, increasing in both, persisted to one checkpoint file (Kafka's
    LeaderEpochFileCache). Safe to use from several threads."""

    def __init__(self, path: Path) -> None:
        """Load ``path``; a missing or malformed file gives an empty cache (see :attr:`loaded`)."""
        self.path = path
        self._lock = threading.Lock()
        self._entries: list[EpochEntry] = []
        # The newest epoch, -1 when empty: a plain attribute, compared on every leader append.
        self.latest_epoch = UNDEFINED_EPOCH
        self.loaded = self._read()

    def _read(self) -> bool:
        try:
            lines = self.path.read_text().split()
        except FileNotFoundError:
            return False
        try:
            if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
                return False
            count = int(lines[1])
            numbers = [int(word) for word in lines[2:]]
        except ValueError:
            return False
        if len(numbers) != 2 * count:
            return False
        entries = [EpochEntry(numbers[i], numbers[i + 1]) for i in range(0, len(numbers), 2)]
        for previous, entry in zip(entries, entries[1:]):
            if entry.epoch <= previous.epoch or entry.start_offset < previous.start_offset:
                return False
        self._set(entries)
        return True

    def _set(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self.latest_epoch = entries[-1].epoch if entries else UNDEFINED_EPOCH

    def _write(self) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(self._entries))]
        lines.extend(f"{epoch} {start}" for epoch, start in self._entries)
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())

    # -------------------------------------------------------------------------------- queries

    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        with self._lock:
            return list(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch for ``requested_epoch``.

        The latest epoch ends at the log end offset; an older one at the start offset of the first
        epoch above it, paired with the largest epoch at or below the requested one. (-1, -1) when
        the cache is empty or the requested epoch is below the first or above the latest entry.
        """
        with self._lock:
            entries = self._entries
            if requested_epoch < 0 or not entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == entries[-1].epoch:
                return requested_epoch, log_end_offset
            if requested_epoch < entries[0].epoch or requested_epoch > entries[-1].epoch:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = entries[0]
            for entry in entries:
                if entry.epoch > requested_epoch:
                    return floor.epoch, entry.start_offset
                floor = entry
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # unreachable: the latest epoch is above

    # -------------------------------------------------------------------------------- changes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True when the cache changed.

        Ignored unless ``epoch`` is newer than the latest; entries starting at or after
        ``start_offset`` contradict the new one and are removed."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        with self._lock:
            if epoch <= self.latest_epoch:
                return False
            entries = [entry for entry in self._entries if entry.start_offset < start_offset]
            entries.append(EpochEntry(epoch, start_offset))
            self._set(entries)
            self._write()
            return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated there)."""
        with self._lock:
            kept = [entry for entry in self._entries if entry.start_offset < end_offset]
            if len(kept) != len(self._entries):
                self._set(kept)
                self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget what lies below the new log start offset: entries wholly below it are dropped and
        the one covering it now starts there."""
        with self._lock:
            entries = self._entries
            covering = 0
            while covering + 1 < len(entries) and entries[covering + 1].start_offset <= start_offset:
                covering += 1
            if not entries or (covering == 0 and entries[0].start_offset >= start_offset):
                return
            first = entries[covering]
            self._set([EpochEntry(first.epoch, max(first.start_offset, start_offset))] + entries[covering + 1 :])
            self._write()

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            if self._entries:
                self._set([])
                self._write()

    def replace(self, entries: list[EpochEntry]) -> None:
        """Set the entries (a rebuild from the log's batch headers) and write the file."""
        with self._lock:
            self._set(list(entries))
            self._write()
