"""Shared machinery of the sparse index files (.index and .timeindex).

An index file is a sequence of fixed-size big-endian entries whose first field is the search key
(a relative offset or a timestamp), in increasing order. Entries live only on disk: they are
appended with ``os.pwrite`` and searched with a binary search over ``os.pread`` reads, so the
process keeps nothing per entry in memory, only the entry count and the last entry.

The file stays open only while the index is held (the active segment's, or during recovery); an
inactive segment's index opens its file for each operation and closes it again, so a partition with
many segments costs about one descriptor per segment (its .log), as in Kafka.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterator

# Once a binary search has narrowed the range to this many bytes it reads them in one pread.
_SEARCH_CHUNK_BYTES = 4096
_VERIFY_CHUNK_BYTES = 1 << 20


class IndexFile:
    """A file of fixed-size entries, searched on disk by the entry's first field (Kafka's AbstractIndex)."""

    ENTRY: struct.Struct  # set by subclasses

    __slots__ = ("path", "base_offset", "_fd", "entries", "max_entries", "last_entry")

    def __init__(self, path: Path, base_offset: int, max_index_size: int, hold: bool = True) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.ENTRY.size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._load_tail(self._fd)
        finally:
            if not hold:
                self.release()

    def _load_tail(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        self.entries = size // self.ENTRY.size
        self.last_entry: tuple | None = None
        if self.entries:
            raw = os.pread(fd, self.ENTRY.size, (self.entries - 1) * self.ENTRY.size)
            self.last_entry = self.ENTRY.unpack(raw)

    def hold(self) -> None:
        """Keep the file open until :meth:`release` (an active segment's index, or during a rebuild)."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def release(self) -> None:
        """Close the file; later operations open it for their own duration."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _acquire(self) -> int:
        """The held descriptor, or a new one the caller gives back with :meth:`_give_back`."""
        return self._fd if self._fd >= 0 else os.open(self.path, os.O_RDWR)

    def _give_back(self, fd: int) -> None:
        if fd != self._fd:
            os.close(fd)

    def open_for_sync(self) -> int:
        """A new descriptor of the file for an fsync in another thread; the caller closes it."""
        return os.dup(self._fd) if self._fd >= 0 else os.open(self.path, os.O_RDONLY)

    @property
    def is_full(self) -> bool:
        """Whether the index reached log.index.size.max.bytes (the segment must roll)."""
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY.size

    def file_size_is_exact(self) -> bool:
        """Whether the file holds exactly ``entries`` whole entries."""
        return self.path.stat().st_size == self.entries * self.ENTRY.size

    def _append_entry(self, entry: tuple) -> None:
        data = self.ENTRY.pack(*entry)
        fd = self._acquire()
        try:
            os.pwrite(fd, data, self.entries * self.ENTRY.size)
        finally:
            self._give_back(fd)
        self.entries += 1
        self.last_entry = entry

    def _floor_entry(self, key: int) -> tuple | None:
        """The entry with the largest key <= ``key``, or None when every key is larger."""
        last = self.last_entry
        if last is None:
            return None
        if last[0] <= key:
            return last
        entry = self.ENTRY
        size = entry.size
        fd = self._acquire()
        try:
            # Invariant: key(hi) > key; lo == 0 or key(lo) <= key.
            lo, hi = 0, self.entries - 1
            while (hi - lo) * size > _SEARCH_CHUNK_BYTES:
                mid = (lo + hi) >> 1
                if entry.unpack(os.pread(fd, size, mid * size))[0] <= key:
                    lo = mid
                else:
                    hi = mid
            buf = os.pread(fd, (hi - lo) * size, lo * size)
        finally:
            self._give_back(fd)
        # Largest j in [0, hi - lo) with key(j) <= key, or -1.
        a, b = 0, hi - lo
        while a < b:
            m = (a + b) >> 1
            if entry.unpack_from(buf, m * size)[0] <= key:
                a = m + 1
            else:
                b = m
        if a == 0:
            return None
        return entry.unpack_from(buf, (a - 1) * size)

    def iter_entries(self) -> Iterator[tuple]:
        """Every entry in file order, read in bounded chunks (for verification at load)."""
        size = self.ENTRY.size
        step = (_VERIFY_CHUNK_BYTES // size) * size
        total = self.entries * size
        pos = 0
        while pos < total:
            fd = self._acquire()
            try:
                buf = os.pread(fd, min(step, total - pos), pos)
            finally:
                self._give_back(fd)
            if not buf:
                return
            yield from self.ENTRY.iter_unpack(buf[: len(buf) - len(buf) % size])
            pos += len(buf)

    def truncate_to_field_below(self, key: int, field: int = 0) -> None:
        """Drop the entries whose ``field`` is >= ``key`` (the field must not decrease along the file)."""
        entry = self.ENTRY
        size = entry.size
        fd = self._acquire()
        try:
            lo, hi = 0, self.entries
            while lo < hi:
                mid = (lo + hi) >> 1
                if entry.unpack(os.pread(fd, size, mid * size))[field] < key:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < self.entries:
                os.ftruncate(fd, lo * size)
                self._load_tail(fd)
        finally:
            self._give_back(fd)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        os.truncate(self.path, 0)
        self.entries = 0
        self.last_entry = None

    def close(self) -> None:
        self.release()

    def rename(self, new_path: Path) -> None:
        os.rename(self.path, new_path)
        self.path = new_path
