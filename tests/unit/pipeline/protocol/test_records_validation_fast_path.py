"""The shape fast path of validate_records accepts only what the record walk accepts.

Batches whose records share one key and value length and have no headers are matched by a regular
expression (records._shape_pattern) instead of being walked varint by varint. These tests check that
the expression never accepts a record area the walk refuses -- hand-made faults and thousands of
random mutations -- and that it does accept valid areas with timestamp deltas of mixed widths,
keys, null keys and values, so the fast path is really taken.
"""

from __future__ import annotations

import random

import pytest
from kafka.record.util import encode_varint

from pipeline.records import validate as records
from pipeline.records.batch import CorruptBatchError, parse_header
from pipeline.records import InvalidRecordsError, encode_batch, validate_records
from tests.support.record_mutations import mutate


def zz(n: int) -> bytes:
    """A zigzag varint, written by kafka-python rather than the codec under test."""
    out = bytearray()
    encode_varint(n, out.append)
    return bytes(out)


def long_zz(n: int, size: int) -> bytes:
    """The zigzag varint of ``n`` padded to ``size`` bytes with continuation bytes (not minimal)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    for _ in range(size - 1):
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record(offset_delta: int, key: bytes | None = None, value: bytes | None = b"v" * 20, ts_delta: int = 0, *,
           attributes: bytes = b"\x00", headers: bytes = b"\x00", length_adjust: int = 0,
           key_length: int | None = None, value_length: int | None = None, raw_ts: bytes | None = None,
           raw_offset_delta: bytes | None = None) -> bytes:
    """One record, each field overridable to make it wrong."""
    if key_length is None:
        key_length = -1 if key is None else len(key)
    if value_length is None:
        value_length = -1 if value is None else len(value)
    body = b"".join((
        attributes,
        zz(ts_delta) if raw_ts is None else raw_ts,
        zz(offset_delta) if raw_offset_delta is None else raw_offset_delta,
        zz(key_length), key or b"",
        zz(value_length), value or b"",
        headers,
    ))
    return zz(len(body) + length_adjust) + body


def area(n: int, key: bytes | None = None, value: bytes | None = b"v" * 20,
         ts_deltas: list[int] | None = None) -> bytes:
    ts_deltas = ts_deltas or [0] * n
    return b"".join(record(i, key, value, ts_deltas[i]) for i in range(n))


def walk_accepts(data: bytes, count: int) -> bool:
    try:
        records._walk_records(data, 0, len(data), count)
    except CorruptBatchError:  # InvalidRecordsError, or a varint longer than ten bytes
        return False
    return True


def batch_of(data: bytes, count: int) -> bytes:
    """A batch header (CRC not recomputed: validate_records does not check it) around ``data``."""
    batch = bytearray(encode_batch([b"x"])[:61]) + data
    batch[8:12] = (49 + len(data)).to_bytes(4, "big")
    batch[57:61] = count.to_bytes(4, "big")
    return bytes(batch)


def fast_accepts(data: bytes, count: int, klen: int, vlen: int) -> bool:
    return records._matches_shape(records._shape_pattern(klen, vlen), data, 0, len(data), count)


def mixed_deltas(n: int, rng: random.Random) -> list[int]:
    """Timestamp deltas whose varints are one to five bytes wide, negative ones included."""
    return [0] + [rng.choice((rng.randrange(-64, 64), rng.randrange(-8000, 8000), rng.randrange(-10**6, 10**6),
                              rng.randrange(-10**8, 10**8), rng.randrange(-10**10, 10**10))) for _ in range(n - 1)]


SHAPES = [(None, b"v" * 20), (b"key", b"v" * 20), (b"", b""), (None, None), (b"k" * 70, b"v" * 300),
          (None, b"v" * 200)]


def shape_of(key: bytes | None, value: bytes | None) -> tuple[int, int]:
    return (-1 if key is None else len(key)), (-1 if value is None else len(value))


@pytest.mark.parametrize("key,value", SHAPES)
@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 300])
def test_valid_areas_with_mixed_timestamp_widths_take_the_fast_path(key, value, n):
    rng = random.Random(n)
    data = area(n, key, value, mixed_deltas(n, rng))
    assert walk_accepts(data, n)
    assert fast_accepts(data, n, *shape_of(key, value))


def test_offset_deltas_of_three_bytes():
    n = 8300
    data = area(n, None, b"x", [i % 300 for i in range(n)])
    assert fast_accepts(data, n, -1, 1)


def test_any_attributes_byte_and_timestamp_delta_encoding_are_accepted_as_by_the_walk():
    data = record(0) + record(1, attributes=b"\x7f") + record(2, attributes=b"\xff") + record(3, raw_ts=long_zz(5, 3))
    assert walk_accepts(data, 4) and fast_accepts(data, 4, -1, 20)


# (name, area, declared count): every one is refused by the walk.
FAULTS = [
    ("length one too long", record(0) + record(1, length_adjust=1) + record(2), 3),
    ("length one too short", record(0) + record(1, length_adjust=-1) + record(2), 3),
    ("length of the last record too long", record(0) + record(1, length_adjust=1), 2),
    ("offset delta skips", record(0) + record(2) + record(3), 3),
    ("offset delta repeats", record(0) + record(0) + record(1), 3),
    ("offset delta starts at 1", record(1) + record(2), 2),
    ("offset deltas swapped", record(0) + record(2) + record(1), 3),
    ("key length -2", record(0) + record(1, key_length=-2, value=b"v" * 20), 2),
    ("value length -2", record(0) + record(1, value=None, value_length=-2), 2),
    ("key length -2 everywhere", record(0, key_length=-2) + record(1, key_length=-2), 2),
    ("trailing byte", record(0) + record(1) + b"\x00", 2),
    ("trailing record", record(0) + record(1) + record(2), 2),
    ("one record missing", record(0) + record(1), 3),
    ("record runs past the end", record(0) + record(1)[:-1], 2),
    ("length runs past the end", record(0) + record(1, length_adjust=5), 2),
    ("empty area", b"", 2),
    ("headers count -1", record(0) + record(1, headers=zz(-1)), 2),
    ("null header key", record(0) + record(1, headers=zz(1) + zz(-1) + zz(1) + b"x"), 2),
    ("header count says two, one given", record(0) + record(1, headers=zz(2) + zz(1) + b"h" + zz(-1)), 2),
    ("timestamp delta of eleven bytes", record(0) + record(1, raw_ts=b"\x80" * 10 + b"\x00"), 2),
]


@pytest.mark.parametrize("name,data,count", FAULTS, ids=[f[0] for f in FAULTS])
def test_faults_are_refused_by_both(name, data, count):
    assert not walk_accepts(data, count)
    assert not fast_accepts(data, count, -1, 20)
    batch = batch_of(data, count)
    with pytest.raises(CorruptBatchError):
        validate_records(batch, 0, parse_header(batch))


@pytest.mark.parametrize("bad", [
    record(100, length_adjust=1),
    record(100, length_adjust=-1),
    record(101),
    record(100, key_length=-3),
    record(100, headers=zz(1) + zz(-1) + zz(0)),
], ids=["longer", "shorter", "offset delta", "key length", "null header key"])
def test_one_bad_record_deep_in_a_long_area_is_refused(bad):
    """The bad record is the 101st of 200 with timestamp deltas of mixed widths."""
    deltas = mixed_deltas(200, random.Random(7))
    parts = [record(i, ts_delta=delta) for i, delta in enumerate(deltas)]
    parts[100] = bad
    data = b"".join(parts)
    assert not walk_accepts(data, 200)
    assert not fast_accepts(data, 200, -1, 20)


@pytest.mark.parametrize("data,count", [
    (record(0) + record(1, raw_offset_delta=long_zz(1, 2)), 2),
    (record(0) + record(1, raw_ts=long_zz(5, 10)), 2),
    (record(0) + long_zz(len(record(1)) - 1, 2) + record(1)[1:], 2),
    (record(0) + record(1, headers=zz(1) + zz(1) + b"h" + zz(-1)), 2),
])
def test_valid_areas_the_pattern_leaves_to_the_walk(data, count):
    """Non-minimal varints, wide timestamp deltas and headers are valid: the walk accepts them."""
    assert walk_accepts(data, count)
    assert not fast_accepts(data, count, -1, 20)


@pytest.mark.parametrize("key,value", SHAPES)
def test_random_mutations_are_never_accepted_where_the_walk_refuses(key, value):
    rng = random.Random(repr(shape_of(key, value)))
    klen, vlen = shape_of(key, value)
    pattern = records._shape_pattern(klen, vlen)
    n = 70
    accepted_both = refused_both = 0
    for trial in range(600):
        data, count = mutate(area(n, key, value, mixed_deltas(n, rng)), n, rng)
        fast = records._matches_shape(pattern, data, 0, len(data), count)
        walked = walk_accepts(data, count)
        assert walked or not fast, f"trial {trial}: the pattern accepts what the walk refuses"
        accepted_both += fast and walked
        refused_both += not walked
    # The mutations break most batches; those that only touch keys or values leave them valid.
    assert refused_both > 300 and accepted_both > 30, (refused_both, accepted_both)


def test_validate_records_takes_the_fast_path_for_a_shape_seen_twice(monkeypatch):
    rng = random.Random(3)
    n = 500
    timestamps = [1_700_000_000_000 + d for d in sorted(rng.randrange(0, 900) for _ in range(n))]
    keyed = encode_batch([b"x" * 199] * n, [b"k%04d" % i for i in range(n)], timestamps=timestamps)
    values = encode_batch([b"x" * 199] * n, timestamps=timestamps)
    monkeypatch.setattr(records, "_SHAPE_PATTERNS", {})
    monkeypatch.setattr(records, "_SHAPES_SEEN", set())
    for data in (keyed, values):
        validate_records(data, 0, parse_header(data))

    def no_walk(*args: object) -> None:
        raise AssertionError("walked")

    monkeypatch.setattr(records, "_walk_records", no_walk)
    for data in (keyed, values):
        validate_records(data, 0, parse_header(data))
        validate_records(bytearray(data), 0, parse_header(data))
    broken = bytearray(values)
    broken[-1] = 1  # the last record's header count
    with pytest.raises(AssertionError, match="walked"):
        validate_records(bytes(broken), 0, parse_header(broken))


def test_validate_records_refuses_a_bad_record_in_a_shape_it_knows():
    n = 100
    good = batch_of(area(n), n)
    bad = batch_of(area(50) + b"".join(record(i) for i in range(51, n + 1)), n)
    for _ in range(3):  # the pattern is compiled at the second sight of the shape
        validate_records(good, 0, parse_header(good))
        with pytest.raises(InvalidRecordsError) as raised:
            validate_records(bad, 0, parse_header(bad))
        assert raised.value.batch_index == 50
