"""validate_records (pipeline.records.validate): the shape expression and the walk accept exactly
the same record areas, and name the first bad record."""

from __future__ import annotations

import pytest

from pipeline.protocol.compression import GZIP
from pipeline.records import validate
from pipeline.records.batch import HEADER_SIZE, CorruptBatchError, build_batch, parse_header
from pipeline.records.encode import encode_batch
from pipeline.records.validate import InvalidRecordsError, validate_records
from pipeline.records.varint import encode_varint

TS = 1_700_000_000_000


def record(offset_delta: int, value: bytes, key: bytes | None = None) -> bytes:
    body = (b"\x00" + encode_varint(0) + encode_varint(offset_delta)
            + (b"\x01" if key is None else encode_varint(len(key)) + key)
            + encode_varint(len(value)) + value + b"\x00")
    return encode_varint(len(body)) + body


def batch_of(area: bytes, count: int, attributes: int = 0) -> bytes:
    return build_batch(0, -1, attributes, count - 1, TS, TS, -1, -1, -1, count, area)


@pytest.mark.parametrize("count", [1, 7, 8, 50, 300])
@pytest.mark.parametrize("keyed", [False, True])
def test_well_formed_batches_pass_both_ways(count: int, keyed: bool) -> None:
    keys = [b"k%04d" % i for i in range(count)] if keyed else None
    batch = encode_batch([b"v" * 200] * count, keys, timestamp=TS)
    header = parse_header(batch)
    validate_records(batch, 0, header)
    validate_records(batch, 0, header)  # the second batch of a shape is matched by its expression
    validate._walk_records(batch, HEADER_SIZE, len(batch), count)


def test_an_offset_delta_out_of_order_names_its_record() -> None:
    area = b"".join(record(i, b"v" * 20) for i in (0, 1, 2, 4, 3, 5, 6, 7, 8, 9))
    for _ in range(2):
        with pytest.raises(InvalidRecordsError) as caught:
            validate_records(batch_of(area, 10), 0, parse_header(batch_of(area, 10)))
        assert caught.value.batch_index == 3


def test_a_negative_key_length_is_invalid() -> None:
    bad = encode_varint(6) + b"\x00\x00\x00" + encode_varint(-2) + encode_varint(0) + b"\x00"
    with pytest.raises(InvalidRecordsError, match="key length -2") as caught:
        validate_records(batch_of(bad, 1), 0, parse_header(batch_of(bad, 1)))
    assert caught.value.batch_index == 0


def test_a_count_that_does_not_fill_the_area_is_invalid_for_the_batch() -> None:
    area = record(0, b"a") + record(1, b"b")
    batch = batch_of(area, 1)
    with pytest.raises(InvalidRecordsError, match="bytes left") as caught:
        validate_records(batch, 0, parse_header(batch))
    assert caught.value.batch_index == -1
    with pytest.raises(InvalidRecordsError, match="declares 0 records"):
        validate_records(batch_of(area, 0), 0, parse_header(batch_of(area, 0)))


def test_a_compressed_batch_that_expands_past_the_limit_is_corrupt() -> None:
    batch = encode_batch([b"\x00" * 100_000], timestamp=TS, compression=GZIP)
    validate_records(batch, 0, parse_header(batch))
    with pytest.raises(CorruptBatchError):
        validate_records(batch, 0, parse_header(batch), max_decompressed=1000)
