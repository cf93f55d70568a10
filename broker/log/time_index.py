"""The .timeindex file: a sparse map from a timestamp to the first offset reaching it."""

from __future__ import annotations

import struct

from broker.log.index_file import IndexFile


class TimeIndex(IndexFile):
    """Entries of (timestamp int64, relative offset int32), 12 bytes each (Kafka's TimeIndex).

    An entry (t, o) says: the largest batch max timestamp among the batches before offset o is
    below t, and the batch at o reaches t. Entries are written together with offset index entries,
    only when the segment's max timestamp grew, plus one when the segment becomes inactive.
    """

    ENTRY = struct.Struct(">qi")
    __slots__ = ()

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append (timestamp, offset) if ``timestamp`` is larger than the last entry's."""
        last = self.last_entry
        if last is not None and timestamp <= last[0]:
            return
        self._append_entry((timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with a timestamp <= ``timestamp``.

        Returns (-1, base offset) when every entry is later: the search starts at the segment start.
        """
        entry = self._floor_entry(timestamp)
        if entry is None:
            return -1, self.base_offset
        return entry[0], self.base_offset + entry[1]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries naming offsets at or after ``offset``."""
        self.truncate_to_field_below(offset - self.base_offset, 1)

    @property
    def last_timestamp(self) -> int:
        return self.last_entry[0] if self.last_entry else -1

    @property
    def last_offset(self) -> int:
        return self.base_offset + (self.last_entry[1] if self.last_entry else 0)

    def is_consistent(self, next_offset_bound: int | None = None) -> bool:
        """Whether the file is whole entries with increasing timestamps and non-decreasing offsets.

        ``next_offset_bound``, when given, is an offset every entry must stay below.
        """
        if not self.file_size_is_exact():
            return False
        prev_ts, prev_rel = None, 0
        for ts, rel in self.iter_entries():
            if rel < prev_rel or (prev_ts is not None and ts <= prev_ts):
                return False
            if next_offset_bound is not None and self.base_offset + rel >= next_offset_bound:
                return False
            prev_ts, prev_rel = ts, rel
        return True
