"""Records to bytes: one RecordBatch v2 from values, keys, timestamps and headers (the encoding half
of Kafka's DefaultRecord and DefaultRecordBatch).

Each record is

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint | headers

with every varint zigzag-encoded and -1 meaning null. This is the hot loop of the producer and the
mirror, so the common case (values only or keys for every record, no headers) is encoded without a
Python-level loop: the bytes before each key or value are memoised per (offset delta, timestamp
delta, key length, value length) and the batch is assembled by slice assignment into one list and a
single ``bytes.join``. The same layouts let decode find the keys and values of a uniform batch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from itertools import islice, repeat
from typing import NamedTuple

from pipeline.protocol import compression as _compression
from pipeline.records.batch import (
    COMPRESSION_MASK,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
    build_batch,
)
from pipeline.records.record import Header
from pipeline.records.varint import MAX_CACHE_ENTRIES, VARINT, encode_varint, read_varint, varint_size


class _ValuePrefixes(dict):
    """(offsetDelta, timestampDelta, valueLength) -> the bytes before a keyless, headerless record's value.

    The prefix also carries the previous record's trailing headerCount (0) unless offsetDelta is
    0, so a batch is ``prefix, value, prefix, value, ..., b"\\x00"``.
    """

    def __missing__(self, key: tuple[int, int, int]) -> bytes:
        delta, ts_delta, vlen = key
        od = VARINT[delta]
        td = VARINT[ts_delta]
        vl = VARINT[vlen]
        body = 3 + len(td) + len(od) + len(vl) + vlen
        prefix = b"".join((b"\x00" if delta else b"", VARINT[body], b"\x00", td, od, b"\x01", vl))
        if len(self) < MAX_CACHE_ENTRIES:
            self[key] = prefix
        return prefix


class _KeyPrefixes(dict):
    """(offsetDelta, timestampDelta, keyLength, valueLength) -> the bytes before a headerless record's key."""

    def __missing__(self, key: tuple[int, int, int, int]) -> bytes:
        delta, ts_delta, klen, vlen = key
        od = VARINT[delta]
        td = VARINT[ts_delta]
        kl = VARINT[klen]
        body = 2 + len(td) + len(od) + len(kl) + klen + len(VARINT[vlen]) + vlen
        prefix = b"".join((b"\x00" if delta else b"", VARINT[body], b"\x00", td, od, kl))
        if len(self) < MAX_CACHE_ENTRIES:
            self[key] = prefix
        return prefix


_VALUE_PREFIXES = _ValuePrefixes()
_KEY_PREFIXES = _KeyPrefixes()


class Layout(NamedTuple):
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


def _build_layout(klen: int, vlen: int, n: int) -> Layout:
    pos = 0
    value_slices = []
    if klen < 0:
        prefixes = [_VALUE_PREFIXES[(delta, 0, vlen)] for delta in range(n)]
        timestamp_positions = []
        for delta, prefix in enumerate(prefixes):
            # leading headerCount of the previous record (if any), length varint, attributes
            timestamp_positions.append(pos + read_varint(prefix, 1 if delta else 0)[1] + 1)
            pos += len(prefix)
            value_slices.append(slice(pos, pos + vlen))
            pos += vlen
        return Layout(prefixes, None, value_slices, timestamp_positions)
    prefixes = [_KEY_PREFIXES[(delta, 0, klen, vlen)] for delta in range(n)]
    key_slices = []
    timestamp_positions = []
    vl = len(VARINT[vlen])
    for delta, prefix in enumerate(prefixes):
        timestamp_positions.append(pos + read_varint(prefix, 1 if delta else 0)[1] + 1)
        pos += len(prefix)
        key_slices.append(slice(pos, pos + klen))
        pos += klen + vl
        value_slices.append(slice(pos, pos + vlen))
        pos += vlen
    return Layout(prefixes, key_slices, value_slices, timestamp_positions)


_LAYOUTS: dict[tuple[int, int], Layout] = {}
_MAX_LAYOUTS = 256


def layout(klen: int, vlen: int, n: int) -> Layout:
    """The layout for keys of length ``klen`` (-1: null keys) and values of ``vlen``, for >= n records."""
    found = _LAYOUTS.get((klen, vlen))
    if found is None or len(found.prefixes) < n:
        size = max(n, 64) if found is None else max(n, 2 * len(found.prefixes))
        found = _build_layout(klen, vlen, size)
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[(klen, vlen)] = found
    return found


def join_values_only(values: Sequence[bytes], ts_deltas: Sequence[int] | None) -> bytes:
    """The record area of headerless, keyless records with these values and timestamp deltas (None: all 0)."""
    n = len(values)
    lens = list(map(len, values))
    parts = [b"\x00"] * (2 * n + 1)
    if ts_deltas is None and lens.count(lens[0]) == n:
        parts[0 : 2 * n : 2] = islice(layout(-1, lens[0], n).prefixes, n)
    else:
        deltas = repeat(0, n) if ts_deltas is None else ts_deltas
        parts[0 : 2 * n : 2] = map(_VALUE_PREFIXES.__getitem__, zip(range(n), deltas, lens))
    parts[1 : 2 * n : 2] = values
    return b"".join(parts)


def join_keys_and_values(keys: Sequence[bytes], values: Sequence[bytes], ts_deltas: Sequence[int] | None) -> bytes:
    """The record area of headerless records with these keys, values and timestamp deltas (None: all 0)."""
    n = len(values)
    klens = list(map(len, keys))
    vlens = list(map(len, values))
    parts = [b"\x00"] * (4 * n + 1)
    if ts_deltas is None and klens.count(klens[0]) == n and vlens.count(vlens[0]) == n:
        parts[0 : 4 * n : 4] = islice(layout(klens[0], vlens[0], n).prefixes, n)
        parts[2 : 4 * n : 4] = repeat(VARINT[vlens[0]], n)
    else:
        deltas = repeat(0, n) if ts_deltas is None else ts_deltas
        parts[0 : 4 * n : 4] = map(_KEY_PREFIXES.__getitem__, zip(range(n), deltas, klens, vlens))
        parts[2 : 4 * n : 4] = map(encode_varint, vlens)
    parts[1 : 4 * n : 4] = keys
    parts[3 : 4 * n : 4] = values
    return b"".join(parts)


class _HeaderKeys(dict):
    """Header key (str) -> its encoding in a record: the varint of its UTF-8 length, then those bytes. The same
    few keys recur on every record; at most 4096 are kept."""

    def __missing__(self, name: str) -> bytes:
        raw = name.encode()
        if len(self) >= 4096:
            self.clear()
        encoded = self[name] = encode_varint(len(raw)) + raw
        return encoded


_HEADER_KEYS = _HeaderKeys()


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
) -> bytes:
    """One record in full generality (nulls, headers, any timestamp delta), with its length prefix."""
    varint = encode_varint
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
        names = _HEADER_KEYS
        for hkey, hvalue in headers:
            if type(hkey) is str:
                parts.append(names[hkey])
            else:
                hk = bytes(hkey)
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
    size = 1 + varint_size(timestamp_delta) + varint_size(offset_delta)
    size += 1 if key is None else varint_size(len(key)) + len(key)
    size += 1 if value is None else varint_size(len(value)) + len(value)
    if not headers:
        size += 1
    else:
        size += varint_size(len(headers))
        for hkey, hvalue in headers:
            hlen = len(hkey.encode()) if isinstance(hkey, str) else len(hkey)
            size += varint_size(hlen) + hlen
            size += 1 if hvalue is None else varint_size(len(hvalue)) + len(hvalue)
    return varint_size(size) + size


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
                records = join_values_only(values, ts_deltas)
            else:
                records = join_keys_and_values(keys, values, ts_deltas)
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
    return build_batch(
        base_offset,
        partition_leader_epoch,
        attributes,
        n - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
        records,
    )
