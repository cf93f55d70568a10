"""A fixed-size map from a record key to the last offset holding it (Kafka's SkimpyOffsetMap).

The log cleaner builds one over the dirty section of a log. Keys are not stored: an entry is the
16-byte MD5 digest of the key followed by the 8-byte offset, in one buffer of
``log.cleaner.dedupe.buffer.size`` bytes, probed by open addressing. The buffer is a private anonymous
mapping: its pages take memory only once written, and clearing the map gives them back, so an idle
cleaner costs no resident memory. Two keys with the same digest
would be taken for one (a 2^-128 chance per pair, the risk Kafka takes). Memory never grows: the
cleaner stops filling the map at ``load_factor`` of its slots and cleans the rest in a later pass.
"""

from __future__ import annotations

import hashlib
import mmap
import struct

HASH_SIZE = 16
_OFFSET = struct.Struct(">q")
_SLOT = struct.Struct(">Q")
_EMPTY = bytes(HASH_SIZE)
_md5 = hashlib.md5


class OffsetMapFullError(RuntimeError):
    """A put when every slot holds another key."""


class SkimpyOffsetMap:
    """key digest -> offset in a fixed buffer of ``memory`` bytes (24 bytes per slot)."""

    __slots__ = ("memory", "bytes_per_entry", "slots", "_buf", "size", "latest_offset", "lookups", "probes")

    def __init__(self, memory: int) -> None:
        self.bytes_per_entry = HASH_SIZE + _OFFSET.size
        self.slots = memory // self.bytes_per_entry
        if self.slots < 1:
            raise ValueError(f"a dedupe buffer of {memory} bytes holds no entry of {self.bytes_per_entry} bytes")
        self.memory = self.slots * self.bytes_per_entry
        self._buf = mmap.mmap(-1, self.memory, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.size = 0
        # The offset of the last put (Kafka's latestOffset): where a pass that stops early ends.
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0

    @staticmethod
    def digest(key: bytes | bytearray | memoryview) -> bytes:
        """The key's digest (MD5, as Kafka's default log.cleaner.hash.algorithm)."""
        return _md5(key).digest()

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """The byte position of ``digest``'s slot and False, or of the empty slot where it would go and True."""
        buf = self._buf
        entry = self.bytes_per_entry
        slots = self.slots
        slot = _SLOT.unpack_from(digest)[0] % slots
        probes = 1
        while True:
            pos = slot * entry
            found = buf[pos : pos + HASH_SIZE]
            if found == digest:
                self.probes += probes
                return pos, False
            if found == _EMPTY:
                self.probes += probes
                return pos, True
            probes += 1
            if probes > slots:
                raise OffsetMapFullError(f"all {slots} slots of the offset map are taken")
            slot += 1
            if slot == slots:
                slot = 0

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Map ``key`` to ``offset`` (the later put of a key wins)."""
        digest = _md5(key).digest()
        pos, empty = self._find(digest)
        buf = self._buf
        if empty:
            buf[pos : pos + HASH_SIZE] = digest
            self.size += 1
        _OFFSET.pack_into(buf, pos + HASH_SIZE, offset)
        self.latest_offset = offset

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The offset last put for ``key``, or -1."""
        self.lookups += 1
        pos, empty = self._find(_md5(key).digest())
        if empty:
            return -1
        return _OFFSET.unpack_from(self._buf, pos + HASH_SIZE)[0]

    def clear(self) -> None:
        """Forget every entry; the buffer's pages go back to the system (they read as zeros again)."""
        if self.size:
            self._buf.madvise(mmap.MADV_DONTNEED)
        self.size = 0
        self.latest_offset = -1
        self.lookups = self.probes = 0

    @property
    def utilization(self) -> float:
        """The fraction of the slots in use."""
        return self.size / self.slots

    def __len__(self) -> int:
        return self.size
