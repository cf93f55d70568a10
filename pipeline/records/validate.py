"""The broker's check that a produced batch's records parse as Kafka parses them (the record half
of Kafka's DefaultRecordBatch validation), without building any record.

A batch whose records all have one key length, one value length and no headers is matched by a
regular expression compiled for that shape, so the per-record work runs in C; any other batch, or
one the expression does not match, is walked varint by varint, and the walk decides.
"""

from __future__ import annotations

import re

from pipeline.records.batch import BatchHeader, CorruptBatchError
from pipeline.records.decode import Buffer, record_area
from pipeline.records.varint import ZIGZAG_BYTE, encode_varint, read_varint, varint_size


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
    data, start, end = record_area(buf, pos, header, max_decompressed)
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
        deltas = _OFFSET_DELTAS = list(map(encode_varint, range(max(count, 2 * len(deltas)))))
    return deltas[:count]


def _record_shape(data: bytes, pos: int, end: int) -> tuple[int, int, int] | None:
    """(key length, value length, end) of the record at ``pos`` if it has no headers and parses,
    with -1 for a null key or value; None otherwise. A guess for _shape_pattern, which checks it."""
    try:
        length, pos = read_varint(data, pos)
        record_end = pos + length
        _, pos = read_varint(data, pos + 1)
        _, pos = read_varint(data, pos)
        klen, pos = read_varint(data, pos)
        vlen, pos = read_varint(data, pos + max(klen, 0))
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
    key = b"\x01" if klen < 0 else re.escape(encode_varint(klen)) + b".{%d}" % klen
    value = b"\x01" if vlen < 0 else re.escape(encode_varint(vlen)) + b".{%d}" % vlen
    # attributes, key, value, header count
    key_size = 1 if klen < 0 else varint_size(klen) + klen
    value_size = 1 if vlen < 0 else varint_size(vlen) + vlen
    fixed = 1 + key_size + value_size + 1
    heads = []
    for widths in range(2, _MAX_TIMESTAMP_DELTA_BYTES + 4):
        timestamp_deltas = [
            _varint_pattern(ts_width) + b"(?=" + _varint_pattern(widths - ts_width) + b")"
            for ts_width in range(max(1, widths - 3), min(_MAX_TIMESTAMP_DELTA_BYTES, widths - 1) + 1)
        ]
        heads.append(re.escape(encode_varint(fixed + widths)) + b".(?:" + b"|".join(timestamp_deltas) + b")")
    offset_delta = b"(" + _CONTINUATION + b"{0,2}" + _LAST_BYTE + b")"
    record = b"(?:" + b"|".join(heads) + b")" + offset_delta + key + value + b"\x00"
    return re.compile(record + b"|.+", re.DOTALL)


def _walk_records(data: Buffer, pos: int, end: int, count: int) -> None:
    """Check ``count`` records in ``data[pos:end]`` varint by varint (see validate_records).

    The produce path's loop for small batches: the one- and two-byte varint cases are inlined, a
    call to read_varint only for longer ones."""
    zz1 = ZIGZAG_BYTE
    read = read_varint
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
                    length, pos = read(data, pos)
            record_end = pos + length
            if length < 6 or record_end > end:
                raise InvalidRecordsError(f"record {index} declares {length} bytes, {end - pos} left", index)
            # pos is at the attributes byte, which carries nothing; the timestamp delta follows.
            if data[pos + 1] < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                pos += 3
            else:
                pos = read(data, pos + 1)[1]
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
                    number, pos = read(data, pos)
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
                    number, pos = read(data, pos)
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
                    number, pos = read(data, pos)
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
    count, pos = read_varint(data, pos)
    if count < 0:
        raise InvalidRecordsError(f"record {index} has header count {count}", index)
    for _ in range(count):
        klen, pos = read_varint(data, pos)
        if klen < 0:
            raise InvalidRecordsError(f"record {index} has a header key length {klen}", index)
        pos += klen
        vlen, pos = read_varint(data, pos)
        if vlen < -1:
            raise InvalidRecordsError(f"record {index} has a header value length {vlen}", index)
        if vlen > 0:
            pos += vlen
    return pos
