"""validate_records' strided fast path (validate._has_uniform_layout) accepts only what the record
walk accepts: uniform batches of every offset delta and timestamp delta width are accepted without a
walk, and no mutation of one is accepted where the walk refuses it."""

from __future__ import annotations

import random

import pytest
from kafka.record.util import encode_varint

from pipeline.records import InvalidRecordsError, encode_batch, validate_records
from pipeline.records import validate as records
from pipeline.records.batch import CorruptBatchError, parse_header
from tests.support.record_mutations import mutate


def zz(n: int) -> bytes:
    """A zigzag varint, written by kafka-python rather than the codec under test."""
    out = bytearray()
    encode_varint(n, out.append)
    return bytes(out)


def record(offset_delta: int, key: bytes | None, value: bytes | None, ts_delta: int = 0,
           raw_offset_delta: bytes | None = None) -> bytes:
    body = b"".join((
        b"\x00", zz(ts_delta), zz(offset_delta) if raw_offset_delta is None else raw_offset_delta,
        zz(-1 if key is None else len(key)), key or b"",
        zz(-1 if value is None else len(value)), value or b"",
        b"\x00",
    ))
    return zz(len(body)) + body


def area(n: int, key: bytes | None, value: bytes | None, ts_deltas: list[int]) -> bytes:
    return b"".join(record(i, key, value, ts_deltas[i]) for i in range(n))


def walk_accepts(data: bytes, count: int) -> bool:
    try:
        records._walk_records(data, 0, len(data), count)
    except CorruptBatchError:
        return False
    return True


def uniform_accepts(data: bytes, count: int) -> bool:
    try:
        first = records._record_shape(data, 0, len(data))
        return first is not None and records._has_uniform_layout(data, 0, len(data), count, first)
    except (IndexError, CorruptBatchError):
        return False


SHAPES = [(None, b"v" * 20), (b"key", b"v" * 20), (b"", b""), (None, None), (b"k" * 70, b"v" * 300),
          (None, b"v" * 200)]
# Timestamp deltas whose varints are 1, 2, 3, 4 and 5 bytes wide (negative ones included).
TIMESTAMP_RANGES = [(-64, 64), (-8000, -64), (8192, 10**6), (-10**8, -2 * 10**6), (2**28, 2**33)]


def same_width_deltas(n: int, width: int, rng: random.Random) -> list[int]:
    low, high = TIMESTAMP_RANGES[width - 1]
    deltas = [rng.randrange(low, high) for _ in range(n)]
    assert {len(zz(d)) for d in deltas} == {width}
    return deltas


@pytest.mark.parametrize("key,value", SHAPES)
@pytest.mark.parametrize("n", [8, 63, 64, 65, 300])
@pytest.mark.parametrize("width", [1, 2, 3, 4, 5])
def test_uniform_areas_of_every_width_are_accepted_as_by_the_walk(key, value, n, width):
    data = area(n, key, value, same_width_deltas(n, width, random.Random(n * width)))
    assert walk_accepts(data, n)
    assert uniform_accepts(data, n)


def test_offset_deltas_of_three_bytes():
    n = 8300
    data = area(n, None, b"x", [7] * n)
    assert uniform_accepts(data, n)
    assert not uniform_accepts(data, n - 1) and not uniform_accepts(data, n + 1)


@pytest.mark.parametrize("data,count", [
    (area(10, None, b"v", [0] * 9 + [100]), 10),
    (area(10, None, b"v", [0] * 10)[:-11] + record(9, None, b"v", raw_offset_delta=b"\x92\x00"), 10),
    (area(9, None, b"v", [0] * 9) + record(9, None, b"vv"), 10),
    (area(9, b"k", b"v", [0] * 9) + record(9, None, b"v"), 10),
    (area(9, None, b"v", [0] * 9) + record(9, None, b"v")[:-1] + b"\x02\x00\x00", 10),
], ids=["wider timestamp delta", "non-minimal offset delta", "longer value", "null key", "a header"])
def test_areas_that_are_not_uniform_are_left_to_the_other_ways(data, count):
    assert not uniform_accepts(data, count)


@pytest.mark.parametrize("key,value", SHAPES)
def test_random_mutations_are_never_accepted_where_the_walk_refuses(key, value):
    rng = random.Random(repr((key, value)))
    n = 70
    accepted_both = refused_both = 0
    for trial in range(600):
        data, count = mutate(area(n, key, value, same_width_deltas(n, rng.randrange(1, 6), rng)), n, rng)
        fast = uniform_accepts(data, count)
        walked = walk_accepts(data, count)
        assert walked or not fast, f"trial {trial}: the strided check accepts what the walk refuses"
        accepted_both += fast and walked
        refused_both += not walked
    assert refused_both > 300 and accepted_both > 30, (refused_both, accepted_both)


def test_validate_records_takes_no_walk_for_a_producers_batch(monkeypatch):
    def no_walk(*args: object) -> None:
        raise AssertionError("walked")

    monkeypatch.setattr(records, "_walk_records", no_walk)
    monkeypatch.setattr(records, "_has_one_shape", no_walk)
    for batch in (encode_batch([b"x" * 199] * 500), encode_batch([b"x"] * 9, [b"k"] * 9)):
        validate_records(batch, 0, parse_header(batch))
        validate_records(bytearray(batch), 0, parse_header(batch))


def test_a_bad_record_in_a_uniform_batch_is_named():
    good = bytearray(encode_batch([b"x" * 50] * 100))
    first = parse_header(good)
    validate_records(good, 0, first)
    size = (len(good) - 61 - 36) // 100  # a record's size below offset delta 64, one byte more from there
    assert 61 + 64 * size + 36 * (size + 1) == len(good)
    bad = bytearray(good)
    bad[61 + 64 * size + 7 * (size + 1) - 1] = 2  # record 70's header count
    with pytest.raises(InvalidRecordsError) as raised:
        validate_records(bad, 0, parse_header(bad))
    assert raised.value.batch_index == 70
