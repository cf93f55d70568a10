"""The checks a log runs on batches before it appends them (Kafka's LogValidator and the batch
analysis of UnifiedLog): a produced batch from a client, and the batches a follower fetched from
its leader.

A client's batch must be exactly one well-framed v2 batch with a good CRC, a known codec, a record
count matching its last offset delta, no control flag, a sequence when it has a producer id, records
that parse, and (on a compacted topic) a key on every record. A follower's batches, written by the
leader, are checked for framing, magic, size, CRC and offsets only. Nothing here touches the log.
"""

from __future__ import annotations

import crc32c

from broker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from broker.log.file_records import MIN_BATCH_LENGTH
from pipeline.protocol.compression import CODEC_NAMES
from pipeline.records import InvalidRecordsError, decode_batch, validate_records
from pipeline.records.batch import (
    ATTRIBUTES,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CorruptBatchError,
    parse_header,
)

# A compressed batch whose records take more than this many times max.message.bytes is refused
# unread (INVALID_RECORD) rather than decompressed into memory: well above what real data compresses
# by, far below what a few KiB of crafted zstd or gzip can claim.
MAX_COMPRESSION_RATIO = 64


def validate_client_batch(buf: bytearray, max_batch: int,
                          require_keys: bool = False) -> tuple[int, int, int, int, int, int, int, int]:
    """Check that ``buf`` is exactly one batch a client may write, as Kafka's ProduceRequest and
    LogValidator check it: v2 framing, size, CRC, a known codec, no control flag, a sequence when
    it has a producer id, a record count matching lastOffsetDelta, records that parse, and (for a
    compacted log, ``require_keys``) a key on every record.
    Returns (position, size, lastOffsetDelta, max timestamp, producer id, epoch, base sequence,
    attributes). Whether a transactional batch's producer may write is the request layer's check."""
    n = len(buf)
    if n == 0:
        raise InvalidRecordError("the request holds no record batch")
    if n < HEADER_SIZE:
        raise InvalidRecordError(f"{n} bytes are not a whole batch")
    header = parse_header(buf)
    _, length, _, magic, crc, attributes, last_delta, _, max_ts, pid, epoch, seq, count = header
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"the batch declares length {length}, below the header size")
    size = length + LOG_OVERHEAD
    if size > n:
        raise InvalidRecordError(f"the batch runs {size - n} bytes past the request")
    if magic != 2:
        raise InvalidRecordError(f"the batch has magic {magic}; Produce v3+ carries only v2 batches")
    if size < n:
        raise InvalidRecordError("Produce v3+ allows exactly one record batch per partition")
    if size > max_batch:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_batch}")
    if crc32c.crc32c(memoryview(buf)[ATTRIBUTES:size]) != crc:
        raise CorruptRecordError("the batch fails its CRC-32C check")
    if attributes & COMPRESSION_MASK not in CODEC_NAMES:
        raise UnsupportedCompressionTypeError(f"unknown compression codec {attributes & COMPRESSION_MASK}")
    if count <= 0 or last_delta + 1 != count:
        raise InvalidRecordError(f"the batch holds {count} records but lastOffsetDelta {last_delta}")
    if attributes & CONTROL_FLAG:
        raise InvalidRecordError("clients may not write control batches")
    if attributes & TRANSACTIONAL_FLAG and pid < 0:
        raise InvalidRecordError("a transactional batch must carry a producer id")
    if pid >= 0 and seq < 0:
        raise InvalidRecordError(f"producer id {pid} with an invalid sequence number {seq}")
    try:
        validate_records(buf, 0, header, max(max_batch, 1) * MAX_COMPRESSION_RATIO)
    except InvalidRecordsError as exc:
        record_errors = [] if exc.batch_index < 0 else [(exc.batch_index, str(exc))]
        raise InvalidRecordError(f"the batch's records do not parse: {exc}", record_errors) from None
    except CorruptBatchError as exc:
        raise InvalidRecordError(f"the batch's records do not parse: {exc}") from None
    if require_keys:
        keyless = [index for index, record in enumerate(decode_batch(buf, 0, check_crc=False)[1]) if record.key is None]
        if keyless:
            raise InvalidRecordError("a compacted topic cannot accept records without a key",
                                     [(index, "the record has no key") for index in keyless])
    return 0, size, last_delta, max_ts, pid, epoch, seq, attributes


def validate_replicated_batches(buf: bytearray, max_batch: int) -> list[tuple[int, int, BatchHeader]]:
    """(position, size, header) of the whole batches at the start of ``buf``, fetched from the leader;
    a trailing partial batch is left out. Raises CorruptRecordError on bad framing, magic, CRC or a
    negative lastOffsetDelta, RecordTooLargeError on a batch over max.message.bytes."""
    n = len(buf)
    batches = []
    pos = 0
    while pos + HEADER_SIZE <= n:
        h = parse_header(buf, pos)
        if h.batch_length < MIN_BATCH_LENGTH or h.magic != 2:
            raise CorruptRecordError(f"batch at byte {pos} of the fetched data has bad framing or magic {h.magic}")
        size = h.batch_length + LOG_OVERHEAD
        if pos + size > n:
            break
        if size > max_batch:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_batch}")
        if h.last_offset_delta < 0 or crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES : pos + size]) != h.crc:
            raise CorruptRecordError(f"batch at offset {h.base_offset} fails its CRC-32C check")
        batches.append((pos, size, h))
        pos += size
    return batches
