"""The RecordBatch v2 record codec: encode a batch of records, decode batches back into records.

The fixed 61-byte header and its CRC live in :mod:`pipeline.records.batch`; this module handles
what follows it. Each record is

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint | headers

with every varint zigzag-encoded and -1 meaning null. This codec is the hot loop of the producer,
the consumers, the mirror and the ETL, so the common case (values only or keys for every record,
no headers) is encoded without a Python-level loop: the bytes before each key or value are
memoised per (offset delta, timestamp delta, key length, value length) and the batch is
assembled by slice assignment into one list and a single ``bytes.join``.

Decoding first tries the "uniform" shape (all keys and all values of one length each, no
headers, one-byte timestamp deltas -- what fixed-size events give): keys and values are sliced
at precomputed positions and the result is verified by re-encoding and comparing bytes, so the
shortcut never changes a result. Any other batch goes through one tight per-record loop with the
one- and two-byte varint cases inlined.

Validation (validate_records, the broker's check of produced batches) builds no records: a batch
whose records all have one key length, one value length and no headers is matched by a regular
expression compiled for that shape, so the per-record work runs in C; any other batch, or one the
expression does not match, is walked varint by varint, and the walk decides.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Sequence
from itertools import islice, repeat
from typing import NamedTuple

import crc32c

from pipeline.protocol import compression as _compression
from pipeline.records.batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CorruptBatchError,
    iter_batches,
    parse_header,
)
from pipeline.protocol.compression import CompressionError
from pipeline.protocol.decompression_limit import decompress_at_most

__all__ = [
    "Record",
    "BatchBuilder",
    "encode_batch",
    "decode_batch",
    "decode_records",
    "record_size",
    "validate_records",
    "CorruptBatchError",
    "InvalidRecordsError",
]

Header = tuple[str, "bytes | None"]
Buffer = bytes | bytearray | memoryview

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc -- the part outside the CRC.
_HEAD = struct.Struct(">qiibI")
# attributes .. recordCount -- the part of the header covered by the CRC.
_TAIL = struct.Struct(">hiqqqhii")

_MAX_CACHE_ENTRIES = 1 << 18


class Record(NamedTuple):
    """One decoded record: its absolute offset and timestamp, key, value and headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def _zigzag_varint(n: int) -> bytes:
    """Encode a signed 64-bit integer as a zigzag varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


class _VarintTable(dict):
    """int -> zigzag varint bytes, filled on first use (bounded, then computed without storing)."""

    def __missing__(self, n: int) -> bytes:
        encoded = _zigzag_varint(n)
        if len(self) < _MAX_CACHE_ENTRIES:
            self[n] = encoded
        return encoded


_VARINT = _VarintTable((n, _zigzag_varint(n)) for n in range(-64, 1 << 14))
_varint = _VARINT.__getitem__


def _varint_size(n: int) -> int:
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z > 0x7F:
        z >>= 7
        size += 1
    return size


class _ValuePrefixes(dict):
    """(offsetDelta, timestampDelta, valueLength) -> the bytes before a keyless, headerless record's value.

    The prefix also carries the previous record's trailing headerCount (0) unless offsetDelta is
    0, so a batch is ``prefix, value, prefix, value, ..., b"\\x00"``.
    """

    def __missing__(self, key: tuple[int, int, int]) -> bytes:
        delta, ts_delta, vlen = key
        od = _VARINT[delta]
        td = _VARINT[ts_delta]
        vl = _VARINT[vlen]
        body = 3 + len(td) + len(od) + len(vl) + vlen
        prefix = b"".join((b"\x00" if delta else b"", _VARINT[body], b"\x00", td, od, b"\x01", vl))
        if len(self) < _MAX_CACHE_ENTRIES:
            self[key] = prefix
        return prefix


class _KeyPrefixes(dict):
    """(offsetDelta, timestampDelta, keyLength, valueLength) -> the bytes before a headerless record's key."""

    def __missing__(self, key: tuple[int, int, int, int]) -> bytes:
        delta, ts_delta, klen, vlen = key
        od = _VARINT[delta]
        td = _VARINT[ts_delta]
        kl = _VARINT[klen]
        body = 2 + len(td) + len(od) + len(kl) + klen + len(_VARINT[vlen]) + vlen
        prefix = b"".join((b"\x00" if delta else b"", _VARINT[body], b"\x00", td, od, kl))
        if len(self) < _MAX_CACHE_ENTRIES:
            self[key] = prefix
        return prefix


_VALUE_PREFIXES = _ValuePrefixes()
_KEY_PREFIXES = _KeyPrefixes()


class _Layout(NamedTuple):
    """The shape shared by the records of a uniform batch: every key of one length (or every key
    null), every value of one length, no headers, and timestamp deltas of one byte (-64..63). Entry i
    of each list is for offset delta i; a layout built for n records serves batches of up to n.

    ``prefixes`` are the bytes before each key (or value, for null keys) when the timestamp delta
    is 0, the slices locate the keys and values in the record area, and ``timestamp_positions``
    the one-byte timestamp deltas.
    """

    prefixes: list[bytes]
    key_slices: list[slice] | None
    value_slices: list[slice]
    timestamp_positions: list[int]


def _build_layout(klen: int, vlen: int, n: int) -> _Layout:
    pos = 0
    value_slices = []
    if klen < 0:
        prefixes = [_VALUE_PREFIXES[(delta, 0, vlen)] for delta in range(n)]
        timestamp_positions = []
        for delta, prefix in enumerate(prefixes):
            # leading headerCount of the previous record (if any), length varint, attributes
            timestamp_positions.append(pos + _read_varint(prefix, 1 if delta else 0)[1] + 1)
            pos += len(prefix)
            value_slices.append(slice(pos, pos + vlen))
            pos += vlen
        return _Layout(prefixes, None, value_slices, timestamp_positions)
    prefixes = [_KEY_PREFIXES[(delta, 0, klen, vlen)] for delta in range(n)]
    key_slices = []
    timestamp_positions = []
    vl = len(_VARINT[vlen])
    for delta, prefix in enumerate(prefixes):
        timestamp_positions.append(pos + _read_varint(prefix, 1 if delta else 0)[1] + 1)
        pos += len(prefix)
        key_slices.append(slice(pos, pos + klen))
        pos += klen + vl
        value_slices.append(slice(pos, pos + vlen))
        pos += vlen
    return _Layout(prefixes, key_slices, value_slices, timestamp_positions)


_LAYOUTS: dict[tuple[int, int], _Layout] = {}
_MAX_LAYOUTS = 256


def _layout(klen: int, vlen: int, n: int) -> _Layout:
    """The layout for keys of length ``klen`` (-1: null keys) and values of ``vlen``, for >= n records."""
    layout = _LAYOUTS.get((klen, vlen))
    if layout is None or len(layout.prefixes) < n:
        size = max(n, 64) if layout is None else max(n, 2 * len(layout.prefixes))
        layout = _build_layout(klen, vlen, size)
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[(klen, vlen)] = layout
    return layout


def _join_values_only(values: Sequence[bytes], ts_deltas: Sequence[int] | None) -> bytes:
    n = len(values)
    lens = list(map(len, values))
    parts = [b"\x00"] * (2 * n + 1)
    if ts_deltas is None and lens.count(lens[0]) == n:
        parts[0 : 2 * n : 2] = islice(_layout(-1, lens[0], n).prefixes, n)
    else:
        deltas = repeat(0, n) if ts_deltas is None else ts_deltas
        parts[0 : 2 * n : 2] = map(_VALUE_PREFIXES.__getitem__, zip(range(n), deltas, lens))
    parts[1 : 2 * n : 2] = values
    return b"".join(parts)


def _join_keys_and_values(keys: Sequence[bytes], values: Sequence[bytes], ts_deltas: Sequence[int] | None) -> bytes:
    n = len(values)
    klens = list(map(len, keys))
    vlens = list(map(len, values))
    parts = [b"\x00"] * (4 * n + 1)
    if ts_deltas is None and klens.count(klens[0]) == n and vlens.count(vlens[0]) == n:
        parts[0 : 4 * n : 4] = islice(_layout(klens[0], vlens[0], n).prefixes, n)
        parts[2 : 4 * n : 4] = repeat(_VARINT[vlens[0]], n)
    else:
        deltas = repeat(0, n) if ts_deltas is None else ts_deltas
        parts[0 : 4 * n : 4] = map(_KEY_PREFIXES.__getitem__, zip(range(n), deltas, klens, vlens))
        parts[2 : 4 * n : 4] = map(_varint, vlens)
    parts[1 : 4 * n : 4] = keys
    parts[3 : 4 * n : 4] = values
    return b"".join(parts)


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
) -> bytes:
    """One record in full generality (nulls, headers, any timestamp delta), with its length prefix."""
    varint = _varint
    parts = [b"\x00", varint(timestamp_delta), varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(varint(len(value)))
        parts.append(value)
    if not headers:
        parts.append(b"\x00")
    else:
        parts.append(varint(len(headers)))
        for hkey, hvalue in headers:
            hk = hkey.encode() if isinstance(hkey, str) else bytes(hkey)
            parts.append(varint(len(hk)))
            parts.append(hk)
            if hvalue is None:
                parts.append(b"\x01")
            else:
                parts.append(varint(len(hvalue)))
                parts.append(hvalue)
    body = b"".join(parts)
    return varint(len(body)) + body


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None = None,
) -> int:
    """Exact encoded size in bytes of one record, including its length prefix."""
    size = 1 + _varint_size(timestamp_delta) + _varint_size(offset_delta)
    size += 1 if key is None else _varint_size(len(key)) + len(key)
    size += 1 if value is None else _varint_size(len(value)) + len(value)
    if not headers:
        size += 1
    else:
        size += _varint_size(len(headers))
        for hkey, hvalue in headers:
            hlen = len(hkey.encode()) if isinstance(hkey, str) else len(hkey)
            size += _varint_size(hlen) + hlen
            size += 1 if hvalue is None else _varint_size(len(hvalue)) + len(hvalue)
    return _varint_size(size) + size


def now_ms() -> int:
    """The current wall-clock time in milliseconds, Kafka's timestamp unit."""
    return time.time_ns() // 1_000_000


def encode_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    *,
    timestamps: Sequence[int] | None = None,
    timestamp: int | None = None,
    headers: Sequence[Sequence[Header] | None] | None = None,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    compression_level: int | None = None,
) -> bytes:
    """Encode one RecordBatch v2 holding ``values`` (with optional per-record keys and headers).

    Record i gets offset ``base_offset + i``. Timestamps come from ``timestamps`` (one per record),
    else ``timestamp`` for all records, else the current time. The records are compressed with
    ``compression`` (a codec id from :mod:`pipeline.protocol.compression`) and the CRC-32C is set.
    """
    n = len(values)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    if keys is not None and len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} values")
    if headers is not None and len(headers) != n:
        raise ValueError(f"{len(headers)} header lists for {n} values")
    if timestamps is not None:
        if len(timestamps) != n:
            raise ValueError(f"{len(timestamps)} timestamps for {n} values")
        base_timestamp = timestamps[0]
        max_timestamp = max(timestamps)
        if timestamps.count(base_timestamp) == n:
            timestamps = None
    else:
        base_timestamp = max_timestamp = now_ms() if timestamp is None else timestamp
    if headers is not None and not any(headers):
        headers = None
    if keys is not None and keys[0] is None and keys.count(None) == n:
        keys = None

    ts_deltas = None if timestamps is None else [t - base_timestamp for t in timestamps]
    records = None
    if headers is None:
        try:
            if keys is None:
                records = _join_values_only(values, ts_deltas)
            else:
                records = _join_keys_and_values(keys, values, ts_deltas)
        except TypeError:
            # len(None): a null key or value, which only the general path below encodes.
            records = None
    if records is None:
        records = b"".join(
            map(
                _encode_record,
                range(n),
                repeat(0, n) if ts_deltas is None else ts_deltas,
                repeat(None, n) if keys is None else keys,
                values,
                repeat(None, n) if headers is None else headers,
            )
        )

    codec = compression & COMPRESSION_MASK
    if codec != compression:
        raise ValueError(f"compression must be a codec id 0-4, got {compression}")
    if codec:
        records = _compression.compress(codec, records, compression_level)
    attributes = codec | (TRANSACTIONAL_FLAG if transactional else 0)
    tail = _TAIL.pack(
        attributes,
        n - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
    )
    crc = crc32c.crc32c(records, crc32c.crc32c(tail))
    head = _HEAD.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), partition_leader_epoch, 2, crc)
    return b"".join((head, tail, records))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint at ``pos``; return (value, position after it)."""
    shift = 0
    z = 0
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatchError(f"varint longer than 10 bytes at byte {pos}")


class _UniformSizes(dict):
    """(keyLength or -1, valueLength, n) -> bytes taken by n records of a uniform batch (see _Layout)."""

    def __missing__(self, shape: tuple[int, int, int]) -> int:
        size = _uniform_size(*shape)
        if len(self) >= _MAX_CACHE_ENTRIES:
            self.clear()
        self[shape] = size
        return size


def _uniform_size(klen: int, vlen: int, n: int) -> int:
    """Bytes taken by n records of a uniform batch (see _Layout) with these key and value lengths."""
    fixed = 3 + _varint_size(vlen) + vlen + (1 if klen < 0 else _varint_size(klen) + klen)
    total = 0
    low = 0
    delta_size = 1
    limit = 64
    while low < n:
        high = min(n, limit)
        body = fixed + delta_size
        total += (high - low) * (_varint_size(body) + body)
        low = high
        delta_size += 1
        limit <<= 7
    return total


_UNIFORM_SIZES = _UniformSizes()


def _uniform_fields(
    data: bytes, start: int, end: int, n: int
) -> tuple[list[bytes] | None, list[bytes], list[int] | None] | None:
    """(keys or None for null keys, values, timestamp deltas or None for all 0) of a uniform batch
    (see _Layout), or None if the record area is not uniform.

    The shape is guessed from the first record; the keys, values and timestamp deltas are read
    where that shape puts them, and the guess is confirmed by re-encoding them and comparing with
    the record area, so a batch is only accepted here when a full parse would give the same records.
    """
    try:
        _, pos = _read_varint(data, start)
        # attributes 0, timestamp delta 0 (the first record's, by Kafka's choice of base), offset delta 0
        if data[pos : pos + 3] != b"\x00\x00\x00":
            return None
        klen, pos = _read_varint(data, pos + 3)
        if klen < -1:
            return None
        vlen, _ = _read_varint(data, pos + max(klen, 0))
    except (IndexError, CorruptBatchError):
        return None
    if vlen < 0 or _UNIFORM_SIZES[(klen, vlen, n)] != end - start:
        return None
    layout = _layout(klen, vlen, n)
    area = data if start == 0 and end == len(data) else data[start:end]
    raw_deltas = list(map(area.__getitem__, islice(layout.timestamp_positions, n)))
    if raw_deltas.count(0) == n:
        deltas = None
    elif max(raw_deltas) < 0x80:
        deltas = list(map(_ZZ1.__getitem__, raw_deltas))
    else:
        return None
    values = list(map(area.__getitem__, islice(layout.value_slices, n)))
    if layout.key_slices is None:
        if _join_values_only(values, deltas) != area:
            return None
        return None, values, deltas
    keys = list(map(area.__getitem__, islice(layout.key_slices, n)))
    if _join_keys_and_values(keys, values, deltas) != area:
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


_ZZ1 = [(b >> 1) ^ -(b & 1) for b in range(128)]
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
    """Decode ``count`` records from ``data[pos:end]``; the area must end exactly after the last one."""
    zz1 = _ZZ1
    read_varint = _read_varint
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


def _read_headers(data: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    count, pos = _read_varint(data, pos)
    if count < 0:
        raise CorruptBatchError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        klen, pos = _read_varint(data, pos)
        if klen < 0 or pos + klen > len(data):
            raise CorruptBatchError(f"bad header key length {klen}")
        try:
            hkey = data[pos : pos + klen].decode()
        except UnicodeDecodeError as exc:
            raise CorruptBatchError(f"header key is not UTF-8: {exc}") from None
        pos += klen
        vlen, pos = _read_varint(data, pos)
        if vlen < 0:
            hvalue = None
        else:
            hvalue = data[pos : pos + vlen]
            pos += vlen
        headers.append((hkey, hvalue))
    return tuple(headers), pos


def _record_area(buf: Buffer, pos: int, header: BatchHeader, max_size: int | None = None) -> tuple[bytes, int, int]:
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


def _decode_body(buf: Buffer, pos: int, header: BatchHeader) -> list[Record]:
    """The records of a batch whose header (at ``pos``) has been parsed and whose bytes are in ``buf``."""
    data, start, end = _record_area(buf, pos, header)
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


class InvalidRecordsError(CorruptBatchError):
    """A batch whose records do not parse as its header declares; ``batch_index`` is the first bad
    record's position in the batch (-1 when the record area as a whole is wrong)."""

    def __init__(self, message: str, batch_index: int = -1) -> None:
        super().__init__(message)
        self.batch_index = batch_index


def validate_records(buf: Buffer, pos: int, header: BatchHeader, max_decompressed: int | None = None) -> None:
    """Check that the (decompressed) records of the batch at ``pos`` parse as Kafka parses them:
    exactly ``record_count`` records filling the record area, each with a consistent length,
    consecutive offset deltas from 0, no negative key, value or header lengths other than -1 (null)
    and no null header key. Raises InvalidRecordsError (CorruptBatchError if it cannot be
    decompressed, or not into ``max_decompressed`` bytes). Builds no record objects: a batch whose
    records share one shape is matched by a regular expression (see _shape_pattern), any other is
    walked varint by varint."""
    data, start, end = _record_area(buf, pos, header, max_decompressed)
    count = header.record_count
    if count <= 0:
        raise InvalidRecordsError(f"the batch declares {count} records")
    if count < _SHAPED_FROM or not _has_one_shape(data, start, end, count):
        _walk_records(data, start, end, count)


# Batches of fewer records are walked: finding a batch's shape costs more than walking a few records.
_SHAPED_FROM = 8
# The regular expressions take offset deltas of up to three bytes and timestamp deltas of up to five
# (|delta| < 2**34 ms); other batches are walked.
_MAX_SHAPED_RECORDS = 1 << 16
_MAX_TIMESTAMP_DELTA_BYTES = 5
_MAX_SHAPE_PATTERNS = 64
_SHAPE_PATTERNS: dict[tuple[int, int], re.Pattern[bytes]] = {}
# Shapes seen once: a pattern takes about a millisecond to compile, so it is compiled at a shape's
# second batch, not for every one-off shape.
_SHAPES_SEEN: set[tuple[int, int]] = set()
_OFFSET_DELTAS: list[bytes] = []
_CONTINUATION = rb"[\x80-\xff]"
_LAST_BYTE = rb"[\x00-\x7f]"


def _has_one_shape(data: bytes, start: int, end: int, count: int) -> bool:
    """True if ``data[start:end]`` is ``count`` valid records of the first record's shape (see
    _shape_pattern); False if it is not, or not proven so: the caller then walks it."""
    if count > _MAX_SHAPED_RECORDS:
        return False
    first = _record_shape(data, start, end)
    if first is None:
        return False
    klen, vlen, first_end = first
    pattern = _SHAPE_PATTERNS.get((klen, vlen))
    if pattern is None:
        second = _record_shape(data, first_end, end)
        if second is None or second[:2] != (klen, vlen):
            return False
        if (klen, vlen) not in _SHAPES_SEEN:
            if len(_SHAPES_SEEN) >= 16 * _MAX_SHAPE_PATTERNS:
                _SHAPES_SEEN.clear()
            _SHAPES_SEEN.add((klen, vlen))
            return False
        if len(_SHAPE_PATTERNS) >= _MAX_SHAPE_PATTERNS:
            _SHAPE_PATTERNS.clear()
        pattern = _SHAPE_PATTERNS[(klen, vlen)] = _shape_pattern(klen, vlen)
    return _matches_shape(pattern, data, start, end, count)


def _matches_shape(pattern: re.Pattern[bytes], data: bytes, start: int, end: int, count: int) -> bool:
    """True if ``data[start:end]`` is exactly ``count`` records matching ``pattern`` (from
    _shape_pattern) with offset deltas 0, 1, ..., count - 1.

    findall never skips a byte: where no record matches, ``.+`` takes the rest of the area and
    yields an empty offset delta, which no expected one equals. So the list equals the expected
    offset deltas only if the records follow each other from ``start`` exactly to ``end``."""
    return pattern.findall(data, start, end) == _offset_deltas(count)


def _offset_deltas(count: int) -> list[bytes]:
    """The varints of 0, 1, ..., count - 1."""
    global _OFFSET_DELTAS
    deltas = _OFFSET_DELTAS
    if len(deltas) < count:
        # A new list, never a published one extended: another thread may be comparing with it.
        deltas = _OFFSET_DELTAS = list(map(_varint, range(max(count, 2 * len(deltas)))))
    return deltas[:count]


def _record_shape(data: bytes, pos: int, end: int) -> tuple[int, int, int] | None:
    """(key length, value length, end) of the record at ``pos`` if it has no headers and parses,
    with -1 for a null key or value; None otherwise. A guess for _shape_pattern, which checks it."""
    try:
        length, pos = _read_varint(data, pos)
        record_end = pos + length
        _, pos = _read_varint(data, pos + 1)
        _, pos = _read_varint(data, pos)
        klen, pos = _read_varint(data, pos)
        vlen, pos = _read_varint(data, pos + max(klen, 0))
        pos += max(vlen, 0)
        if klen < -1 or vlen < -1 or record_end > end or pos + 1 != record_end or data[pos] != 0:
            return None
    except (IndexError, CorruptBatchError):
        return None
    return klen, vlen, record_end


def _varint_pattern(size: int) -> bytes:
    """A regular expression for one varint of exactly ``size`` bytes."""
    return _CONTINUATION * (size - 1) + _LAST_BYTE


def _shape_pattern(klen: int, vlen: int) -> re.Pattern[bytes]:
    """A regular expression matching one valid headerless record with keys of ``klen`` bytes and
    values of ``vlen`` (-1: null), or else the rest of the area (see _matches_shape). Its one group
    is the record's offset delta varint.

    A record matches only if its length varint is the minimal encoding of the length its timestamp
    and offset deltas' widths give it: one alternative per (timestamp delta width, offset delta
    width), the latter fixed by a lookahead before the group. The key and value length varints must
    be the minimal encodings of ``klen`` and ``vlen``, the header count 0; the attributes byte and
    the timestamp delta's value are free, as in _walk_records. Records that match are ones the walk
    accepts; records that do not match (other varint encodings, wider timestamp deltas) are left to
    the walk, which decides."""
    key = b"\x01" if klen < 0 else re.escape(_varint(klen)) + b".{%d}" % klen
    value = b"\x01" if vlen < 0 else re.escape(_varint(vlen)) + b".{%d}" % vlen
    # attributes, key, value, header count
    key_size = 1 if klen < 0 else _varint_size(klen) + klen
    value_size = 1 if vlen < 0 else _varint_size(vlen) + vlen
    fixed = 1 + key_size + value_size + 1
    heads = []
    for widths in range(2, _MAX_TIMESTAMP_DELTA_BYTES + 4):
        timestamp_deltas = [
            _varint_pattern(ts_width) + b"(?=" + _varint_pattern(widths - ts_width) + b")"
            for ts_width in range(max(1, widths - 3), min(_MAX_TIMESTAMP_DELTA_BYTES, widths - 1) + 1)
        ]
        heads.append(re.escape(_varint(fixed + widths)) + b".(?:" + b"|".join(timestamp_deltas) + b")")
    offset_delta = b"(" + _CONTINUATION + b"{0,2}" + _LAST_BYTE + b")"
    record = b"(?:" + b"|".join(heads) + b")" + offset_delta + key + value + b"\x00"
    return re.compile(record + b"|.+", re.DOTALL)


def _walk_records(data: Buffer, pos: int, end: int, count: int) -> None:
    zz1 = _ZZ1
    read_varint = _read_varint
    index = 0
    try:
        while index < count:
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
            if length < 6 or record_end > end:
                raise InvalidRecordsError(f"record {index} declares {length} bytes, {end - pos} left", index)
            # pos is at the attributes byte, which carries nothing; the timestamp delta follows.
            if data[pos + 1] < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                pos += 3
            else:
                pos = read_varint(data, pos + 1)[1]
            b = data[pos]
            if b < 0x80:
                number = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    number = (z >> 1) ^ -(z & 1)
                    pos += 2
                else:
                    number, pos = read_varint(data, pos)
            if number != index:
                raise InvalidRecordsError(f"record {index} has offset delta {number}", index)
            b = data[pos]
            if b < 0x80:
                number = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    number = (z >> 1) ^ -(z & 1)
                    pos += 2
                else:
                    number, pos = read_varint(data, pos)
            if number > 0:
                pos += number
            elif number < -1:
                raise InvalidRecordsError(f"record {index} has a key length {number}", index)
            b = data[pos]
            if b < 0x80:
                number = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    number = (z >> 1) ^ -(z & 1)
                    pos += 2
                else:
                    number, pos = read_varint(data, pos)
            if number > 0:
                pos += number
            elif number < -1:
                raise InvalidRecordsError(f"record {index} has a value length {number}", index)
            if data[pos]:
                pos = _skip_headers(data, pos, index)
            else:
                pos += 1
            if pos != record_end:
                raise InvalidRecordsError(f"record {index} ends at byte {pos}, its length says {record_end}", index)
            index += 1
    except IndexError:
        raise InvalidRecordsError(f"record {index} runs past the end of the batch", index) from None
    if pos != end:
        raise InvalidRecordsError(f"{end - pos} bytes left after the batch's {count} records")


def _skip_headers(data: Buffer, pos: int, index: int) -> int:
    zz1 = _ZZ1
    b = data[pos]
    if b < 0x80:
        count = zz1[b]
        pos += 1
    else:
        count, pos = _read_varint(data, pos)
    if count < 0:
        raise InvalidRecordsError(f"record {index} has header count {count}", index)
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            klen = zz1[b]
            pos += 1
        else:
            klen, pos = _read_varint(data, pos)
        if klen < 0:
            raise InvalidRecordsError(f"record {index} has a header key length {klen}", index)
        pos += klen
        b = data[pos]
        if b < 0x80:
            vlen = zz1[b]
            pos += 1
        else:
            vlen, pos = _read_varint(data, pos)
        if vlen < -1:
            raise InvalidRecordsError(f"record {index} has a header value length {vlen}", index)
        if vlen > 0:
            pos += vlen
    return pos


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
    if check_crc and crc32c.crc32c(memoryview(buf)[pos + 21 : pos + header.size]) != header.crc:
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


class BatchBuilder:
    """Accumulates records for one partition until the batch would exceed ``max_bytes``, then builds it.

    The size kept is the exact uncompressed size of the batch; with compression the built batch is
    usually smaller. The first record is always accepted, however large, so that an oversized
    record still travels in a batch of its own (the broker then decides whether it is too large).
    """

    def __init__(self, max_bytes: int = 16384, compression: int = 0, compression_level: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.compression = compression
        self.compression_level = compression_level
        self._values: list[bytes | None] = []
        self._keys: list[bytes | None] = []
        self._timestamps: list[int] = []
        self._headers: list[Sequence[Header] | None] = []
        self._size = HEADER_SIZE

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        timestamp: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> bool:
        """Add a record; False (and nothing added) when it would push the batch over ``max_bytes``."""
        if timestamp is None:
            timestamp = now_ms()
        n = len(self._values)
        delta = timestamp - self._timestamps[0] if n else 0
        size = record_size(n, delta, key, value, headers)
        if n and self._size + size > self.max_bytes:
            return False
        self._size += size
        self._values.append(value)
        self._keys.append(key)
        self._timestamps.append(timestamp)
        self._headers.append(headers)
        return True

    def __len__(self) -> int:
        return len(self._values)

    @property
    def size(self) -> int:
        """Bytes the batch takes uncompressed so far (header included)."""
        return self._size

    def is_empty(self) -> bool:
        """Whether no record has been appended yet."""
        return not self._values

    def build(self, **header_fields: object) -> bytes:
        """Encode the records appended so far; ``header_fields`` are encode_batch's keyword arguments
        (base_offset, producer_id, producer_epoch, base_sequence, partition_leader_epoch, transactional)."""
        for name in ("values", "keys", "timestamps", "timestamp", "headers", "compression", "compression_level"):
            if name in header_fields:
                raise TypeError(f"build() does not take {name!r}: it is set by append() or the constructor")
        return encode_batch(
            self._values,
            self._keys,
            timestamps=self._timestamps,
            headers=self._headers,
            compression=self.compression,
            compression_level=self.compression_level,
            **header_fields,  # type: ignore[arg-type]
        )
