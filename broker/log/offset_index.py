"""The .index file: a sparse map from offset to the file position of the batch starting there."""

from __future__ import annotations

import struct

from broker.log.index_file import IndexFile


class OffsetIndex(IndexFile):
    """Entries of (relative offset int32, position int32), 8 bytes each (Kafka's OffsetIndex).

    An entry names the base offset of a batch and the byte position where that batch starts in the
    segment's .log file; one is written whenever index_interval_bytes were appended since the last.
    """

    ENTRY = struct.Struct(">ii")
    __slots__ = ()

    def append(self, offset: int, position: int) -> None:
        """Record that the batch starting at ``offset`` begins at byte ``position``."""
        self._append_entry((offset - self.base_offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last indexed batch starting at or before ``offset``.

        Returns (base offset, 0) when no entry is that small: scanning starts at the file's start.
        """
        entry = self._floor_entry(offset - self.base_offset)
        if entry is None:
            return self.base_offset, 0
        return self.base_offset + entry[0], entry[1]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of batches starting at or after ``offset``."""
        self.truncate_to_field_below(offset - self.base_offset, 0)

    @property
    def last_offset(self) -> int:
        """The offset of the last entry (the base offset when the index is empty)."""
        return self.base_offset + (self.last_entry[0] if self.last_entry else 0)

    @property
    def last_position(self) -> int:
        return self.last_entry[1] if self.last_entry else 0

    def is_consistent(self, log_size: int) -> bool:
        """Whether the file is whole entries, strictly increasing, all pointing inside the log."""
        if not self.file_size_is_exact():
            return False
        prev_rel, prev_pos = -1, -1
        for rel, pos in self.iter_entries():
            if rel <= prev_rel or pos <= prev_pos or pos >= log_size:
                return False
            prev_rel, prev_pos = rel, pos
        return True
