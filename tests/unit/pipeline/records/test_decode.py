"""Decoding records (pipeline.records.decode): the uniform fast path, the general loop and
record_spans give the same records, and damaged record areas are corrupt."""

from __future__ import annotations

import pytest

from pipeline.protocol.compression import GZIP, NONE, ZSTD
from pipeline.records.batch import HEADER_SIZE, CorruptBatchError, parse_header
from pipeline.records.decode import (
    _decode_record_area,
    _decode_uniform,
    decode_batch,
    decode_records,
    record_area,
    record_spans,
)
from pipeline.records.encode import encode_batch
from pipeline.records.record import Record

TS = 1_700_000_000_000


def both_paths(batch: bytes) -> tuple[list[Record] | None, list[Record]]:
    header = parse_header(batch)
    data, start, end = record_area(batch, 0, header)
    args = (data, start, end, header.record_count, header.base_offset, header.base_timestamp, None)
    return _decode_uniform(*args), _decode_record_area(*args)


@pytest.mark.parametrize("keys", [None, [b"k%03d" % i for i in range(100)]])
def test_uniform_batches_take_the_fast_path_and_agree_with_the_loop(keys) -> None:
    batch = encode_batch([b"v" * 200] * 100, keys, timestamps=[TS + i % 50 for i in range(100)], base_offset=7)
    fast, slow = both_paths(batch)
    assert fast is not None and fast == slow
    assert [r.offset for r in fast] == list(range(7, 107))
    assert decode_batch(batch)[1] == slow


def test_other_batches_are_left_to_the_loop() -> None:
    values = [b"v" * n for n in range(1, 30)]
    fast, slow = both_paths(encode_batch(values, timestamp=TS))
    assert fast is None
    assert [r.value for r in slow] == values


def test_nulls_and_headers_decode() -> None:
    batch = encode_batch([None, b"", b"v"], [b"k", None, b""], timestamp=TS,
                         headers=[[("a", b"1")], None, [("b", None), ("c", b"")]])
    assert decode_batch(batch)[1] == [
        Record(0, TS, b"k", None, (("a", b"1"),)),
        Record(1, TS, None, b"", ()),
        Record(2, TS, b"", b"v", (("b", None), ("c", b""))),
    ]


@pytest.mark.parametrize("codec", [NONE, GZIP, ZSTD])
def test_record_spans_locate_every_record(codec: int) -> None:
    keys = [b"a", None, b"c"]
    values = [b"1", b"22", None]
    batch = encode_batch(values, keys, timestamps=[TS, TS + 5, TS + 2], base_offset=40, compression=codec)
    data, spans = record_spans(batch, 0, parse_header(batch))
    assert [(offset, ts_delta, key, has_value) for _, _, offset, ts_delta, key, has_value in spans] == [
        (40, 0, b"a", True), (41, 5, None, True), (42, 2, b"c", False)]
    assert b"".join(data[start:end] for start, end, *_ in spans) == (
        data if codec else batch[HEADER_SIZE:])


def test_a_record_area_with_bytes_left_over_is_corrupt() -> None:
    batch = bytearray(encode_batch([b"v", b"w"], timestamp=TS))
    batch[57:61] = (1).to_bytes(4, "big")  # recordCount 1, two records present
    with pytest.raises(CorruptBatchError, match="bytes left"):
        decode_batch(batch, check_crc=False)
    with pytest.raises(CorruptBatchError, match="records end at"):
        record_spans(bytes(batch), 0, parse_header(batch))


def test_a_record_area_cut_short_is_corrupt() -> None:
    batch = bytearray(encode_batch([b"v", b"w"], timestamp=TS))
    batch[57:61] = (3).to_bytes(4, "big")
    with pytest.raises(CorruptBatchError, match="ends inside a record"):
        decode_batch(batch, check_crc=False)
    with pytest.raises(CorruptBatchError, match="run past"):
        record_spans(bytes(batch), 0, parse_header(batch))


def test_decode_records_skips_below_min_offset_and_stops_at_a_partial_batch() -> None:
    first = encode_batch([b"a", b"b"], timestamp=TS)
    second = encode_batch([b"c"], timestamp=TS, base_offset=2)
    records, stop = decode_records(first + second + second[:20], min_offset=1)
    assert [r.value for r in records] == [b"b", b"c"]
    assert stop == len(first) + len(second)
