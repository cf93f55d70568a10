"""One segment of a partition's log: a .log file of whole batches with its .index, .timeindex and
(once a transaction aborted in it) .txnindex.

The segment knows its base offset, its size and a few running values (largest timestamp, bytes
since the last index entry, next offset); everything per batch stays in the files. The .log file stays
open; the index files only while the segment is active (see IndexFile).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterator

import crc32c

from broker.log.errors import CorruptRecordError
from broker.log.file_records import iter_file_batches
from broker.log.log_config import LogConfig
from broker.log.offset_index import OffsetIndex
from broker.log.time_index import TimeIndex
from broker.log.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex
from pipeline.records.batch import ATTRIBUTES, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, CorruptBatchError, parse_header
from pipeline.records import decode_batch

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
# The log cleaner's segments: written as .cleaned, renamed .swap once complete, then to their final names
# (Kafka's CleanedFileSuffix and SwapFileSuffix).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

INT32_MAX = 0x7FFFFFFF

_BASE_OFFSET = struct.Struct(">q")
_RECOVERY_CHUNK = 1 << 20
_HEADER_SCAN_CHUNK = 64 * 1024


def segment_file_prefix(base_offset: int) -> str:
    """Kafka's file name stem for a segment: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}"


class LogSegment:
    """A .log file of RecordBatch v2 batches plus its sparse offset and time indexes (Kafka's LogSegment)."""

    __slots__ = (
        "dir",
        "base_offset",
        "log_path",
        "fd",
        "size",
        "index",
        "time_index",
        "txn_index",
        "index_interval_bytes",
        "max_timestamp",
        "offset_of_max_timestamp",
        "bytes_since_last_index_entry",
        "next_offset",
        "created_ms",
        "indexes_were_missing",
        "_first_batch_timestamp",
    )

    def __init__(
        self, dir: Path, base_offset: int, config: LogConfig, now_ms: int, hold_indexes: bool = True, suffix: str = ""
    ) -> None:
        """``suffix`` (CLEANED_SUFFIX or SWAP_SUFFIX) names a segment the cleaner is writing or swapping in."""
        stem = segment_file_prefix(base_offset)
        self.dir = dir
        self.base_offset = base_offset
        self.log_path = dir / (stem + LOG_SUFFIX + suffix)
        index_path = dir / (stem + INDEX_SUFFIX + suffix)
        time_index_path = dir / (stem + TIME_INDEX_SUFFIX + suffix)
        self.indexes_were_missing = not (index_path.exists() and time_index_path.exists())
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.index = OffsetIndex(index_path, base_offset, config.max_index_size, hold_indexes)
        self.time_index = TimeIndex(time_index_path, base_offset, config.max_index_size, hold_indexes)
        self.txn_index = TransactionIndex(dir / (stem + TXN_INDEX_SUFFIX + suffix))
        self.index_interval_bytes = config.index_interval_bytes
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.next_offset = base_offset
        self.created_ms = now_ms
        self._first_batch_timestamp: int | None = None

    # ----------------------------------------------------------------------------------- append

    def append(self, buf: bytearray, batches: list[tuple[int, int, int, int, int]]) -> None:
        """Write ``buf`` (whole batches, offsets already assigned) at the end with one pwrite.

        ``batches`` lists (position in buf, base offset, next offset, max timestamp, size) per
        batch, in order. On a failed write the file is cut back to its previous size.
        """
        start = self.size
        try:
            written = os.pwrite(self.fd, buf, start)
            while written < len(buf):
                written += os.pwrite(self.fd, memoryview(buf)[written:], start + written)
        except BaseException:
            os.ftruncate(self.fd, start)
            raise
        if start == 0 and batches:
            self._first_batch_timestamp = batches[0][3]
        for pos, base, _, max_ts, size in batches:
            self._index_batch(start + pos, base, max_ts, size)
        self.next_offset = batches[-1][2]
        self.size = start + len(buf)

    def _index_batch(self, position: int, base_offset: int, max_timestamp: int, size: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def should_roll(self, config: LogConfig, append_size: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        """Whether an append of ``append_size`` bytes must go to a new segment (Kafka's shouldRoll)."""
        if self.size == 0:
            return False
        if self.size + append_size > config.segment_bytes:
            return True
        if self.index.is_full or self.time_index.is_full:
            return True
        if last_offset - self.base_offset > INT32_MAX:
            return True
        first_ts = self.first_batch_timestamp()
        waited = max_timestamp - first_ts if first_ts >= 0 else now_ms - self.created_ms
        return waited > config.segment_ms

    def first_batch_timestamp(self) -> int:
        """The max timestamp of the segment's first batch (-1 when empty), the base of time rolls."""
        if self._first_batch_timestamp is None:
            if self.size < HEADER_SIZE:
                return -1
            self._first_batch_timestamp = parse_header(os.pread(self.fd, HEADER_SIZE, 0)).max_timestamp
        return self._first_batch_timestamp

    def on_become_inactive(self) -> None:
        """Record the segment's final largest timestamp in the time index (at roll and close), then
        stop holding the index files open."""
        if self.size > 0 and self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.release_indexes()

    def hold_indexes(self) -> None:
        """Keep both index files open (while active, or while recovering)."""
        self.index.hold()
        self.time_index.hold()

    def release_indexes(self) -> None:
        """Close both index files; lookups open them for their own duration."""
        self.index.release()
        self.time_index.release()

    # ------------------------------------------------------------------------------------- read

    def locate(self, offset: int, end: int) -> tuple[int, int] | None:
        """(position, size) of the first batch ending at or after ``offset`` within the first
        ``end`` bytes of the file, or None when there is none."""
        chunk = min(self.index_interval_bytes + 1024, _HEADER_SCAN_CHUNK)
        start = self.index.lookup(offset)[1]
        for position, header, _, _ in iter_file_batches(self.fd, start, end, chunk, source=self.log_path):
            if offset <= header.base_offset + header.last_offset_delta:
                return position, header.batch_length + LOG_OVERHEAD
        return None

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every whole batch from byte ``start``, reading headers in chunks.

        Raises CorruptRecordError on a header with bad framing or magic; stops silently at a
        partial batch at the end.
        """
        batches = iter_file_batches(self.fd, start, self.size if end is None else end, _HEADER_SCAN_CHUNK,
                                    source=self.log_path)
        for position, header, _, _ in batches:
            yield position, header

    def find_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``start_offset`` whose timestamp is
        >= ``timestamp``, or None (Kafka's searchForTimestamp). Only batches whose max timestamp
        reaches ``timestamp`` are read and decoded."""
        entry_offset = self.time_index.lookup(timestamp)[1]
        position = self.index.lookup(max(entry_offset, start_offset))[1]
        for batch_position, header in self.iter_headers(position):
            if header.next_offset > start_offset and header.max_timestamp >= timestamp:
                data = os.pread(self.fd, header.size, batch_position)
                try:
                    _, records = decode_batch(data, check_crc=False)
                except CorruptBatchError as exc:
                    raise CorruptRecordError(f"{self.log_path}: batch at byte {batch_position}: {exc}") from None
                for record in records:
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return record.offset, record.timestamp
        return None

    # ------------------------------------------------------------------------------------- load

    def indexes_need_rebuild(self) -> bool:
        """Whether the index files are missing, torn, out of order or pointing past the log."""
        if self.size > 0 and self.indexes_were_missing:
            return True
        if self.index.entries and not self.time_index.entries:
            return True
        return not (self.index.is_consistent(self.size) and self.time_index.is_consistent())

    def load_tail(self) -> bool:
        """Set the running values from the indexes and a scan of the batches after the last index
        entry. False when that scan does not end exactly at the file's end on a whole batch, or
        the last index entry does not point at the batch it names (indexes or log damaged)."""
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = self.time_index.last_offset
        expected = self.index.last_offset
        start = self.index.last_position
        end = start
        # The indexed batch starts exactly at its entry's offset; later ones may follow a gap left by the cleaner.
        exact = bool(self.index.entries)
        try:
            for pos, header in self.iter_headers(start):
                if header.last_offset_delta < 0 or header.base_offset < expected or (exact and header.base_offset != expected):
                    return False
                exact = False
                if header.max_timestamp > self.max_timestamp:
                    self.max_timestamp = header.max_timestamp
                    self.offset_of_max_timestamp = header.base_offset
                expected = header.next_offset
                end = pos + header.size
        except CorruptRecordError:
            return False
        if end != self.size:
            return False
        if self.time_index.entries and self.time_index.last_offset >= expected:
            return False
        self.next_offset = expected
        self.bytes_since_last_index_entry = self.size - start
        return True

    def rebuild_indexes(self) -> bool:
        """Rewrite both indexes from the batch headers (no CRC check). True if the whole file
        is whole, well-framed batches with contiguous offsets."""
        return self._scan_and_index(check_crc=False) == self.size

    def recover(self) -> int:
        """Check every batch (framing, magic, CRC, contiguous offsets), rebuild both indexes, and
        cut the file at the first bad batch. Returns the number of bytes cut off."""
        valid_end = self._scan_and_index(check_crc=True)
        truncated = self.size - valid_end
        if truncated:
            self.truncate_to(valid_end)
        return truncated

    def _scan_and_index(self, check_crc: bool) -> int:
        """Re-index the file from its start; return the end of the last valid batch."""
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index_entry = 0
        self._first_batch_timestamp = None
        self.size = os.fstat(self.fd).st_size
        expected = self.base_offset
        valid_end = 0
        batches = iter_file_batches(self.fd, 0, self.size, _RECOVERY_CHUNK, whole=check_crc)
        try:
            for position, header, buf, off in batches:
                size = header.batch_length + LOG_OVERHEAD
                if header.base_offset < expected or header.last_offset_delta < 0:
                    break
                if check_crc and crc32c.crc32c(memoryview(buf)[off + ATTRIBUTES : off + size]) != header.crc:
                    break
                self._index_batch(position, header.base_offset, header.max_timestamp, size)
                if position == 0:
                    self._first_batch_timestamp = header.max_timestamp
                expected = header.next_offset
                valid_end = position + size
        except CorruptRecordError:
            pass  # a header with bad framing or magic ends the valid part, as a bad CRC does
        self.next_offset = expected
        return valid_end

    # ----------------------------------------------------------------------------- maintenance

    def truncate_to(self, position: int) -> None:
        """Cut the .log file at ``position`` (a batch boundary); the caller rebuilds the indexes."""
        os.ftruncate(self.fd, position)
        self.size = position

    def truncate_to_offset(self, offset: int) -> int:
        """Remove the batches ending at or after ``offset``; return the bytes cut off.

        The .log file is cut and synced before the index entries pointing past the cut go: an
        index left longer by a crash is found inconsistent at load and rebuilt, while an index
        cut before its log would let the load trust the stale tail."""
        found = self.locate(offset, self.size)
        if found is None:
            return 0
        position = found[0]
        first_cut_offset = _BASE_OFFSET.unpack(os.pread(self.fd, _BASE_OFFSET.size, position))[0]
        cut = self.size - position
        self.truncate_to(position)
        os.fsync(self.fd)
        self.index.truncate_to(first_cut_offset)
        self.time_index.truncate_to(first_cut_offset)
        self.txn_index.truncate_to(first_cut_offset)
        if position == 0:
            self._first_batch_timestamp = None
        if not self.load_tail():
            self.rebuild_indexes()
        return cut

    @property
    def largest_timestamp(self) -> int:
        """The largest batch timestamp, or the file's mtime in ms when no batch carries one."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.last_modified_ms

    def open_for_sync(self) -> list[int]:
        """New descriptors of the .log, .index, .timeindex (and .txnindex) files, for an fsync outside
        the log's lock; the caller closes them."""
        fds = [os.dup(self.fd)]
        try:
            fds.append(self.index.open_for_sync())
            fds.append(self.time_index.open_for_sync())
            txn_fd = self.txn_index.open_for_sync()
            if txn_fd is not None:
                fds.append(txn_fd)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.index.close()
        self.time_index.close()
        self.txn_index.close()

    def paths(self) -> list[Path]:
        """The segment's files (the .txnindex whether or not it exists: removers ignore a missing file)."""
        return [self.log_path, self.index.path, self.time_index.path, self.txn_index.path]

    def rename_for_deletion(self) -> list[Path]:
        """Rename the files with the .deleted suffix; return the new paths."""
        return self.change_suffix("", DELETED_SUFFIX)

    def change_suffix(self, old: str, new: str) -> list[Path]:
        """Rename the files from suffix ``old`` to ``new`` (the .log first; Kafka's changeFileSuffixes);
        return the new paths of those that exist (the .txnindex may not)."""
        renamed = []
        for path, rename in ((self.log_path, self._rename_log), (self.index.path, self.index.rename),
                             (self.time_index.path, self.time_index.rename), (self.txn_index.path, self.txn_index.rename)):
            name = path.name[: len(path.name) - len(old)] if old else path.name
            if old and not path.name.endswith(old):
                raise ValueError(f"{path} does not end with {old!r}")
            new_path = path.with_name(name + new)
            if rename(new_path) is not False:
                renamed.append(new_path)
        return renamed

    def _rename_log(self, new_path: Path) -> None:
        os.rename(self.log_path, new_path)
        self.log_path = new_path

    @property
    def last_modified_ms(self) -> int:
        """The .log file's modification time in ms (Kafka's LogSegment.lastModified)."""
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def set_last_modified_ms(self, ms: int) -> None:
        """Set the .log file's modification time (a cleaned segment takes its sources' latest)."""
        os.utime(self.fd, ns=(ms * 1_000_000, ms * 1_000_000))

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"
