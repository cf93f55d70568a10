"""Bytes to records: the records of RecordBatch v2 batches (the decoding half of Kafka's
DefaultRecordBatch and DefaultRecord), for the consumers, the mirror, the ETL and the log cleaner.

Decoding first tries the "uniform" shape (all keys and all values of one length each, no headers,
one-byte timestamp deltas -- what fixed-size events give): keys and values are sliced at the
positions encode's layout gives them and the result is verified by re-encoding and comparing bytes,
so the shortcut never changes a result. Any other batch goes through one tight per-record loop.
``record_spans`` walks a batch's records without building them, for the log cleaner.
"""

from __future__ import annotations

from itertools import islice, repeat

from pipeline.protocol import compression as _compression
from pipeline.protocol.compression import CompressionError
from pipeline.protocol.decompression_limit import decompress_at_most
from pipeline.records.batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CorruptBatchError,
    compute_crc,
    iter_batches,
    parse_header,
)
from pipeline.records.encode import join_keys_and_values, join_values_only, layout
from pipeline.records.record import Header, Record
from pipeline.records.varint import MAX_CACHE_ENTRIES, ZIGZAG_BYTE, read_varint, varint_size

Buffer = bytes | bytearray | memoryview

# A record's place in its batch's record area, for the cleaner: (start, end, offset, timestamp
# delta, key, whether it has a value).
RecordSpan = tuple[int, int, int, int, "bytes | None", bool]


def record_area(buf: Buffer, pos: int, header: BatchHeader, max_size: int | None = None) -> tuple[bytes, int, int]:
    """(data, start, end): where the (decompressed, at most ``max_size`` bytes) records of the batch
    at ``pos`` lie."""
    codec = header.attributes & COMPRESSION_MASK
    start = pos + HEADER_SIZE
    end = pos + header.batch_length + LOG_OVERHEAD
    if codec:
        try:
            area = memoryview(buf)[start:end]
            data = _compression.decompress(codec, area) if max_size is None else decompress_at_most(codec, area, max_size)
        except (CompressionError, _compression.UnknownCodecError) as exc:
            raise CorruptBatchError(f"batch at byte {pos}: {exc}") from None
        return data, 0, len(data)
    if type(buf) is bytes:
        return buf, start, end
    data = bytes(memoryview(buf)[start:end])
    return data, 0, len(data)


class _UniformSizes(dict):
    """(keyLength or -1, valueLength, n) -> bytes taken by n records of a uniform batch (see encode.Layout)."""

    def __missing__(self, shape: tuple[int, int, int]) -> int:
        size = _uniform_size(*shape)
        if len(self) >= MAX_CACHE_ENTRIES:
            self.clear()
        self[shape] = size
        return size


def _uniform_size(klen: int, vlen: int, n: int) -> int:
    """Bytes taken by n records of a uniform batch (see encode.Layout) with these key and value lengths."""
    fixed = 3 + varint_size(vlen) + vlen + (1 if klen < 0 else varint_size(klen) + klen)
    total = 0
    low = 0
    delta_size = 1
    limit = 64
    while low < n:
        high = min(n, limit)
        body = fixed + delta_size
        total += (high - low) * (varint_size(body) + body)
        low = high
        delta_size += 1
        limit <<= 7
    return total


_UNIFORM_SIZES = _UniformSizes()


def _uniform_fields(
    data: bytes, start: int, end: int, n: int
) -> tuple[list[bytes] | None, list[bytes], list[int] | None] | None:
    """(keys or None for null keys, values, timestamp deltas or None for all 0) of a uniform batch
    (see encode.Layout), or None if the record area is not uniform.

    The shape is guessed from the first record; the keys, values and timestamp deltas are read
    where that shape puts them, and the guess is confirmed by re-encoding them and comparing with
    the record area, so a batch is only accepted here when a full parse would give the same records.
    """
    try:
        _, pos = read_varint(data, start)
        # attributes 0, timestamp delta 0 (the first record's, by Kafka's choice of base), offset delta 0
        if data[pos : pos + 3] != b"\x00\x00\x00":
            return None
        klen, pos = read_varint(data, pos + 3)
        if klen < -1:
            return None
        vlen, _ = read_varint(data, pos + max(klen, 0))
    except (IndexError, CorruptBatchError):
        return None
    if vlen < 0 or _UNIFORM_SIZES[(klen, vlen, n)] != end - start:
        return None
    shape = layout(klen, vlen, n)
    area = data if start == 0 and end == len(data) else data[start:end]
    raw_deltas = list(map(area.__getitem__, islice(shape.timestamp_positions, n)))
    if raw_deltas.count(0) == n:
        deltas = None
    elif max(raw_deltas) < 0x80:
        deltas = list(map(ZIGZAG_BYTE.__getitem__, raw_deltas))
    else:
        return None
    values = list(map(area.__getitem__, islice(shape.value_slices, n)))
    if shape.key_slices is None:
        if join_values_only(values, deltas) != area:
            return None
        return None, values, deltas
    keys = list(map(area.__getitem__, islice(shape.key_slices, n)))
    if join_keys_and_values(keys, values, deltas) != area:
        return None
    return keys, values, deltas


def _decode_uniform(
    data: bytes, start: int, end: int, n: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record] | None:
    """Decode a batch whose record area is uniform (see _uniform_fields), or return None if it is not."""
    fields = _uniform_fields(data, start, end, n)
    if fields is None:
        return None
    keys, values, deltas = fields
    if keys is None:
        keys = repeat(None, n)
    if log_append_time is not None:
        timestamps = repeat(log_append_time, n)
    elif deltas is None:
        timestamps = repeat(base_timestamp, n)
    else:
        timestamps = map(base_timestamp.__add__, deltas)
    return list(
        map(
            _new_record,
            repeat(Record, n),
            zip(range(base_offset, base_offset + n), timestamps, keys, values, repeat((), n)),
        )
    )


_new_record = tuple.__new__


def _decode_record_area(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[Record]:
    """Decode ``count`` records from ``data[pos:end]``; the area must end exactly after the last one.

    The consumers' hot loop: the one-byte (and for lengths and offset deltas, two-byte) varint cases
    are inlined, a call to read_varint only for longer ones."""
    zz1 = ZIGZAG_BYTE
    out = []
    append = out.append
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    length = (z >> 1) ^ -(z & 1)
                    pos += 2
                else:
                    length, pos = read_varint(data, pos)
            record_end = pos + length
            # pos is at the attributes byte, which carries nothing yet; the timestamp delta follows.
            b = data[pos + 1]
            if b < 0x80:
                timestamp_delta = zz1[b]
                pos += 2
            else:
                timestamp_delta, pos = read_varint(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    offset_delta = (z >> 1) ^ -(z & 1)
                    pos += 2
                else:
                    offset_delta, pos = read_varint(data, pos)
            b = data[pos]
            if b == 1:
                key = None
                pos += 1
            else:
                if b < 0x80:
                    klen = zz1[b]
                    pos += 1
                else:
                    klen, pos = read_varint(data, pos)
                if klen < 0:
                    raise CorruptBatchError(f"negative key length {klen}")
                key = data[pos : pos + klen]
                pos += klen
            b = data[pos]
            if b < 0x80:
                if b == 1:
                    value = None
                    pos += 1
                else:
                    vlen = zz1[b]
                    pos += 1
                    value = data[pos : pos + vlen]
                    pos += vlen
            else:
                c = data[pos + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    vlen = (z >> 1) ^ -(z & 1)
                    pos += 2
                else:
                    vlen, pos = read_varint(data, pos)
                if vlen < 0:
                    raise CorruptBatchError(f"negative value length {vlen}")
                value = data[pos : pos + vlen]
                pos += vlen
            if data[pos] == 0:
                headers = ()
                pos += 1
            else:
                headers, pos = _read_headers(data, pos)
            if pos != record_end:
                raise CorruptBatchError(f"record ends at byte {pos}, its length says {record_end}")
            append(
                (
                    base_offset + offset_delta,
                    base_timestamp + timestamp_delta if log_append_time is None else log_append_time,
                    key,
                    value,
                    headers,
                )
            )
    except IndexError:
        raise CorruptBatchError("record area ends inside a record") from None
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes left after the batch's {count} records")
    return list(map(_new_record, repeat(Record, count), out))


# Header keys as read (bytes) -> as str: the same few names recur on every record (lineage, tracing).
_HEADER_NAMES: dict[bytes, str] = {}
_HEADER_NAMES_MAX = 4096


def _read_headers(data: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    """The headers at ``pos`` (their count first) and the position after them; one-byte varints inlined, the
    keys' UTF-8 decoding cached."""
    zz1 = ZIGZAG_BYTE
    b = data[pos]
    if b < 0x80:
        count = zz1[b]
        pos += 1
    else:
        count, pos = read_varint(data, pos)
    if count < 0:
        raise CorruptBatchError(f"negative header count {count}")
    names = _HEADER_NAMES
    size = len(data)
    headers = []
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            klen = zz1[b]
            pos += 1
        else:
            klen, pos = read_varint(data, pos)
        if klen < 0 or pos + klen > size:
            raise CorruptBatchError(f"bad header key length {klen}")
        raw = data[pos : pos + klen]
        hkey = names.get(raw)
        if hkey is None:
            try:
                hkey = raw.decode()
            except UnicodeDecodeError as exc:
                raise CorruptBatchError(f"header key is not UTF-8: {exc}") from None
            if len(names) >= _HEADER_NAMES_MAX:
                names.clear()
            names[raw] = hkey
        pos += klen
        b = data[pos]
        if b < 0x80:
            vlen = zz1[b]
            pos += 1
        else:
            vlen, pos = read_varint(data, pos)
        if vlen < 0:
            headers.append((hkey, None))
        else:
            headers.append((hkey, data[pos : pos + vlen]))
            pos += vlen
    return tuple(headers), pos


def _decode_body(buf: Buffer, pos: int, header: BatchHeader) -> list[Record]:
    """The records of a batch whose header (at ``pos``) has been parsed and whose bytes are in ``buf``."""
    data, start, end = record_area(buf, pos, header)
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    if header.record_count < 0:
        raise CorruptBatchError(f"batch at byte {pos} declares {header.record_count} records")
    if header.record_count and end > start:
        records = _decode_uniform(
            data,
            start,
            end,
            header.record_count,
            header.base_offset,
            header.base_timestamp,
            log_append_time,
        )
        if records is not None:
            return records
    return _decode_record_area(
        data, start, end, header.record_count, header.base_offset, header.base_timestamp, log_append_time
    )


def decode_batch(buf: Buffer, pos: int = 0, *, check_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    """Decode the one whole batch at ``pos`` in ``buf``: its header and its (decompressed) records.

    Raises CorruptBatchError if the batch is truncated, is not magic 2, fails its CRC (with
    ``check_crc``) or its records do not match its framing.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError(f"{len(buf) - pos} bytes at byte {pos} cannot hold a batch header")
    header = parse_header(buf, pos)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > len(buf):
        raise CorruptBatchError(f"batch at byte {pos} declares length {header.batch_length}, {len(buf) - pos} bytes present")
    if header.magic != 2:
        raise CorruptBatchError(f"batch at byte {pos} has magic {header.magic}, only v2 (magic 2) is supported")
    if check_crc and compute_crc(buf, pos, header.size) != header.crc:
        raise CorruptBatchError(f"batch at byte {pos} fails its CRC-32C check")
    return header, _decode_body(buf, pos, header)


def decode_records(
    buf: Buffer, *, check_crc: bool = True, skip_control: bool = True, min_offset: int = 0
) -> tuple[list[Record], int]:
    """Decode every whole batch in ``buf`` (e.g. a Fetch response's records field).

    Returns the records with offset >= ``min_offset`` and the position where parsing stopped: the
    end of the last whole batch, which is ``len(buf)`` unless ``buf`` ends in a partial batch (which
    is ignored, as fetch responses may cut the last batch short). Control batches (transaction
    markers) are left out when ``skip_control``. Raises CorruptBatchError on bad framing or CRC.
    """
    records: list[Record] = []
    stop = 0
    for pos, header in iter_batches(buf, check_crc):
        stop = pos + header.size
        if header.base_offset + header.last_offset_delta < min_offset:
            continue
        if skip_control and header.attributes & CONTROL_FLAG:
            continue
        batch_records = _decode_body(buf, pos, header)
        if header.base_offset < min_offset:
            batch_records = [r for r in batch_records if r.offset >= min_offset]
        if records:
            records.extend(batch_records)
        else:
            records = batch_records
    return records, stop


def record_spans(buf: Buffer, pos: int, header: BatchHeader) -> tuple[bytes, list[RecordSpan]]:
    """The (decompressed) record area of the batch at ``pos`` and, per record, where it lies in that
    area, its offset, timestamp delta, key and whether it has a value (see RecordSpan): what the log
    cleaner needs to keep or drop records and copy the kept ones' bytes, without building records."""
    data, start, end = record_area(buf, pos, header)
    base = header.base_offset
    spans: list[RecordSpan] = []
    append = spans.append
    at = start
    varint = read_varint
    zz1 = ZIGZAG_BYTE
    try:
        for _ in range(header.record_count):
            length, p = varint(data, at)
            record_end = p + length
            ts_delta, p = varint(data, p + 1)  # after the attributes byte
            # offsetDelta, then keyLength: most often one byte each (the cleaner's hot loop inlines that case)
            b = data[p]
            if b < 0x80:
                offset_delta = zz1[b]
                p += 1
            else:
                offset_delta, p = varint(data, p)
            b = data[p]
            if b < 0x80:
                key_length = zz1[b]
                p += 1
            else:
                key_length, p = varint(data, p)
            if key_length < 0:
                key = None
            else:
                key = data[p : p + key_length]
                p += key_length
            # A null value is the varint -1, the single byte 0x01.
            append((at, record_end, base + offset_delta, ts_delta, key, data[p] != 1))
            at = record_end
    except IndexError:
        raise CorruptBatchError(f"batch at offset {base}: records run past the batch") from None
    if at != end:
        raise CorruptBatchError(f"batch at offset {base}: records end at {at - start} of {end - start} bytes")
    return data, spans
