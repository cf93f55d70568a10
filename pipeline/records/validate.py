"""The broker's check that a produced batch's records parse as Kafka parses them (the record half
of Kafka's DefaultRecordBatch validation), without building any record.

A batch whose records all have one key length, one value length, one timestamp delta width and no
headers -- what producers write -- lies in runs of equal-sized records (one run per offset delta
width), so each field is checked for a whole run at once by one strided slice per byte (see
_has_uniform_layout), whatever the records' size. Other batches with one key and value length are
matched by a regular expression compiled for that shape, so the per-record work still runs in C;
any other batch, or one neither matches, is walked varint by varint, and the walk decides.
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
    first = _record_shape(data, start, end) if _SHAPED_FROM <= count <= _MAX_SHAPED_RECORDS else None
    if first is None or not (_has_uniform_layout(data, start, end, count, first)
                             or _has_one_shape(data, start, end, count, first)):
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


# Offset delta varints are one byte below 64, two below 8192, three up to _MAX_SHAPED_RECORDS.
_OFFSET_DELTA_RUNS = ((0, 64), (64, 8192), (8192, 1 << 16))
# bytes.translate deletes these: what is left of a slice of continuation bytes (or of last bytes) is
# what is not one.
_CONTINUATION_BYTES = bytes(range(0x80, 0x100))
_LAST_BYTES = bytes(range(0x80))
# (run start, byte) -> that byte of the offset delta varints of the run's indices, one per index.
_OFFSET_DELTA_COLUMNS: dict[tuple[int, int], bytes] = {}


def _has_uniform_layout(data: bytes, start: int, end: int, count: int, first: tuple[int, int, int]) -> bool:
    """True if ``data[start:end]`` is ``count`` valid headerless records of the first record's key
    and value lengths and timestamp delta width, with offset deltas 0, 1, ..., count - 1, all varints
    minimal but the free timestamp delta. Records of one offset delta width then have one size, so
    each run of them is checked field by field with strided slices (one C call per byte position, not
    per record; see _uniform_layout). ``first`` is the first record's _record_shape. False if not
    proven so: the caller then tries the other ways."""
    klen, vlen, _ = first
    length_size = read_varint(data, start)[1] - start
    timestamp_width = read_varint(data, start + length_size + 1)[1] - start - length_size - 1
    if timestamp_width > _MAX_TIMESTAMP_DELTA_BYTES:
        return False
    layout = _UNIFORM_LAYOUTS.get((klen, vlen, timestamp_width, count))
    if layout is None:
        if len(_UNIFORM_LAYOUTS) >= _MAX_SHAPE_PATTERNS:
            _UNIFORM_LAYOUTS.clear()
        layout = _UNIFORM_LAYOUTS[(klen, vlen, timestamp_width, count)] = _uniform_layout(
            klen, vlen, timestamp_width, count)
    pos = start
    for stride, run_size, timestamp_continuations, timestamp_last, fixed in layout:
        run_end = pos + run_size
        if run_end > end:
            return False
        for offset in timestamp_continuations:
            if data[pos + offset : run_end : stride].translate(None, _CONTINUATION_BYTES):
                return False
        if data[pos + timestamp_last : run_end : stride].translate(None, _LAST_BYTES):
            return False
        for offset, expected in fixed:
            if data[pos + offset : run_end : stride] != expected:
                return False
        pos = run_end
    return pos == end


_UNIFORM_LAYOUTS: dict[tuple[int, int, int, int], list[tuple[int, int, range, int, list[tuple[int, bytes]]]]] = {}


def _uniform_layout(klen: int, vlen: int, timestamp_width: int,
                    count: int) -> list[tuple[int, int, range, int, list[tuple[int, bytes]]]]:
    """Per run of one offset delta width: (record size, run size, offsets in a record of the
    timestamp delta's continuation bytes, offset of its last byte, [(offset of a fixed byte, its
    expected value in each record of the run)])."""
    key = encode_varint(klen) + b"\x00" * max(klen, 0)
    value = encode_varint(vlen) + b"\x00" * max(vlen, 0)
    runs = []
    for width, (low, high) in enumerate(_OFFSET_DELTA_RUNS, 1):
        if low >= count:
            break
        n = min(count, high) - low
        body_size = 1 + timestamp_width + width + len(key) + len(value) + 1
        length = encode_varint(body_size)
        at = len(length) + 1
        fixed = [(i, bytes((b,)) * n) for i, b in enumerate(length)]
        timestamps = range(at, at + timestamp_width - 1)
        at += timestamp_width
        fixed += [(at + i, _offset_delta_column(low, i)[:n]) for i in range(width)]
        at += width
        fixed += [(at + i, bytes((key[i],)) * n) for i in range(len(encode_varint(klen)))]
        at += len(key)
        fixed += [(at + i, bytes((value[i],)) * n) for i in range(len(encode_varint(vlen)))]
        at += len(value)
        fixed.append((at, bytes(n)))
        stride = at + 1
        runs.append((stride, n * stride, timestamps, timestamps.stop, fixed))
    return runs


def _offset_delta_column(low: int, byte: int) -> bytes:
    """Byte ``byte`` of the offset delta varints of low, low + 1, ... up to the end of its run."""
    column = _OFFSET_DELTA_COLUMNS.get((low, byte))
    if column is None:
        high = next(h for lo, h in _OFFSET_DELTA_RUNS if lo == low)
        column = _OFFSET_DELTA_COLUMNS[(low, byte)] = bytes(encode_varint(i)[byte] for i in range(low, high))
    return column


def _has_one_shape(data: bytes, start: int, end: int, count: int, first: tuple[int, int, int]) -> bool:
    """True if ``data[start:end]`` is ``count`` valid records of the first record's shape (``first``,
    its _record_shape; see _shape_pattern); False if it is not, or not proven so: the caller then
    walks it."""
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
