"""RecordBatch v2 framing (Kafka's DefaultRecordBatch header): the fixed 61-byte header, CRC-32C
checks, writing a header around a record area, and in-place offset patching.

This is the part of the record format the broker needs (it never decodes individual records);
encode, decode and validate build on it.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

import crc32c

# Byte offsets of the RecordBatch v2 header fields.
BASE_OFFSET = 0
BATCH_LENGTH = 8
PARTITION_LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
LAST_OFFSET_DELTA = 23
BASE_TIMESTAMP = 27
MAX_TIMESTAMP = 35
PRODUCER_ID = 43
PRODUCER_EPOCH = 51
BASE_SEQUENCE = 53
RECORD_COUNT = 57
RECORDS = 61

HEADER_SIZE = RECORDS
# baseOffset + batchLength: the bytes not counted by batchLength.
LOG_OVERHEAD = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc -- the part outside the CRC.
_HEAD = struct.Struct(">qiibI")
# attributes .. recordCount -- the part of the header covered by the CRC.
_TAIL = struct.Struct(">hiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_PRODUCER_FIELDS = struct.Struct(">qhi")


class CorruptBatchError(ValueError):
    """A batch whose framing, magic or CRC is wrong."""


class BatchHeader(NamedTuple):
    """The decoded fixed header of one RecordBatch v2."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire and on disk."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


_new_header = tuple.__new__


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the fixed header of the batch starting at ``pos``; the buffer must hold 61 bytes there."""
    # tuple.__new__ rather than _make: the struct gives exactly the 13 fields, and the segment scans call this per batch
    return _new_header(BatchHeader, _HEADER.unpack_from(buf, pos))


def peek_offset_and_length(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Return (baseOffset, batchLength) of the batch at ``pos`` (12 bytes needed)."""
    return _OFFSET_AND_LENGTH.unpack_from(buf, pos)


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of a batch's bytes from the attributes field to its end."""
    view = memoryview(buf)[pos + ATTRIBUTES : pos + size]
    return crc32c.crc32c(view)


def crc_matches(buf: bytes | bytearray | memoryview, pos: int = 0, header: BatchHeader | None = None) -> bool:
    """Whether the stored CRC of the batch at ``pos`` matches its contents."""
    if header is None:
        header = parse_header(buf, pos)
    return compute_crc(buf, pos, header.size) == header.crc


def iter_batches(buf: bytes | bytearray | memoryview, check_crc: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in ``buf``.

    Raises CorruptBatchError on bad framing, a magic other than 2, or (with ``check_crc``) a CRC
    mismatch. A trailing partial batch is not yielded and not an error: callers compare the end
    position with the buffer length when a partial tail matters.
    """
    end = len(buf)
    pos = 0
    while pos + LOG_OVERHEAD <= end:
        _, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptBatchError(f"batch at byte {pos} declares length {length}, below the header size")
        size = length + LOG_OVERHEAD
        if pos + size > end:
            return
        header = _new_header(BatchHeader, _HEADER.unpack_from(buf, pos))
        if header.magic != 2:
            raise CorruptBatchError(f"batch at byte {pos} has magic {header.magic}, only v2 (magic 2) is supported")
        if check_crc and compute_crc(buf, pos, size) != header.crc:
            raise CorruptBatchError(f"batch at byte {pos} fails its CRC-32C check")
        yield pos, header
        pos += size


def build_batch(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    records: bytes,
) -> bytes:
    """One whole batch: a magic 2 header with these fields and its CRC-32C, then ``records`` (the
    record area, compressed or not as ``attributes`` say)."""
    tail = _TAIL.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c.crc32c(records, crc32c.crc32c(tail))
    head = _HEAD.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), partition_leader_epoch, 2, crc)
    return b"".join((head, tail, records))


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Overwrite the baseOffset of the batch at ``pos`` (outside the CRC, so the CRC stays valid)."""
    _INT64.pack_into(buf, pos + BASE_OFFSET, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Overwrite the partitionLeaderEpoch of the batch at ``pos`` (also outside the CRC)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH, epoch)


def with_producer_fields(batch: bytes | bytearray, producer_id: int, producer_epoch: int, base_sequence: int,
                         transactional: bool = False) -> bytes:
    """A copy of the one batch ``batch`` with its producerId, producerEpoch and baseSequence replaced (and, with
    ``transactional``, its transactional attribute bit set) and its CRC recomputed (those fields are inside the
    CRC): an idempotent or transactional producer numbers a batch when it first sends it."""
    buf = bytearray(batch)
    _PRODUCER_FIELDS.pack_into(buf, PRODUCER_ID, producer_id, producer_epoch, base_sequence)
    if transactional:
        buf[ATTRIBUTES + 1] |= TRANSACTIONAL_FLAG
    _UINT32.pack_into(buf, CRC, compute_crc(buf, 0, len(buf)))
    return bytes(buf)
