"""Encoding records (pipeline.records.encode): every path gives the bytes kafka-python writes."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from pipeline.records.batch import HEADER_SIZE
from pipeline.records.encode import (
    encode_batch,
    join_keys_and_values,
    join_values_only,
    layout,
    now_ms,
    record_size,
)

TS = 1_700_000_000_000


def kafka_batch(values, keys=None, timestamps=None, headers=None) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, value in enumerate(values):
        builder.append(i, TS if timestamps is None else timestamps[i], None if keys is None else keys[i], value,
                       [] if headers is None else headers[i])
    return bytes(builder.build())


@pytest.mark.parametrize(
    "values, keys, timestamps, headers",
    [
        ([b"v" * 200] * 50, None, None, None),  # the uniform values-only layout
        ([b"v" * 200] * 50, [b"key-%04d" % i for i in range(50)], None, None),  # the uniform keyed layout
        ([b"x" * n for n in range(1, 40)], None, [TS + i for i in range(39)], None),  # prefixes per record
        ([b"x" * n for n in range(1, 40)], [b"k"] * 39, [TS - i for i in range(39)], None),
        ([b"a", None, b""], [None, b"k", b""], None, None),  # nulls: the general path
        ([b"a", b"b"], None, None, [[("h", b"1")], [("h2", None), ("h3", b"")]]),  # headers: the general path
    ],
)
def test_records_area_matches_kafka_python(values, keys, timestamps, headers) -> None:
    ours = encode_batch(values, keys, timestamps=timestamps, timestamp=None if timestamps else TS, headers=headers)
    theirs = kafka_batch(values, keys, timestamps, headers)
    assert ours[HEADER_SIZE:] == theirs[HEADER_SIZE:]


def test_join_functions_are_the_record_area_of_headerless_records() -> None:
    values = [b"v" * 30] * 5
    keys = [b"k" * 4] * 5
    assert join_values_only(values, None) == encode_batch(values, timestamp=TS)[HEADER_SIZE:]
    assert join_keys_and_values(keys, values, [0, 1, 2, 3, 4]) == encode_batch(
        values, keys, timestamps=[TS + i for i in range(5)])[HEADER_SIZE:]


def test_a_layout_locates_keys_and_values() -> None:
    keys = [b"%03d" % i for i in range(70)]
    values = [b"value-%04d" % i for i in range(70)]
    area = join_keys_and_values(keys, values, None)
    shape = layout(3, 10, 70)
    assert len(shape.prefixes) >= 70
    assert [area[s] for s in shape.key_slices[:70]] == keys
    assert [area[s] for s in shape.value_slices[:70]] == values
    assert all(area[p] == 0 for p in shape.timestamp_positions[:70])


@pytest.mark.parametrize("key, value, headers", [(None, b"v" * 300, None), (b"k", None, [("h", b"x" * 200)]),
                                                 (b"", b"", [("a", None)])])
def test_record_size_is_the_encoded_size(key, value, headers) -> None:
    single = encode_batch([value], [key], timestamp=TS, headers=[headers])
    assert HEADER_SIZE + record_size(0, 0, key, value, headers) == len(single)


def test_without_timestamps_a_batch_is_stamped_now() -> None:
    before = now_ms()
    stamped = int.from_bytes(encode_batch([b"v"])[27:35], "big")
    assert before <= stamped <= now_ms()
