"""BatchBuilder (pipeline.records.builder): sizes, the first record, and what build() takes."""

from __future__ import annotations

import pytest

from pipeline.records import decode_batch
from pipeline.records.batch import HEADER_SIZE
from pipeline.records.builder import BatchBuilder

TS = 1_700_000_000_000


def test_size_is_exact_and_the_limit_refuses_the_record_that_would_cross_it() -> None:
    builder = BatchBuilder(max_bytes=HEADER_SIZE + 3 * 60)
    assert builder.is_empty() and builder.size == HEADER_SIZE
    appended = 0
    while builder.append(b"v" * 50, timestamp=TS + appended):
        appended += 1
    assert appended == len(builder) == 3
    batch = builder.build(base_offset=10)
    assert len(batch) == builder.size
    header, records = decode_batch(batch)
    assert header.base_offset == 10 and [r.offset for r in records] == [10, 11, 12]
    assert [r.timestamp for r in records] == [TS, TS + 1, TS + 2]


def test_an_oversized_first_record_still_gets_a_batch() -> None:
    builder = BatchBuilder(max_bytes=100)
    assert builder.append(b"x" * 1000, key=b"k", headers=[("h", b"1")], timestamp=TS)
    assert not builder.append(b"y", timestamp=TS)
    _, records = decode_batch(builder.build())
    assert records[0].value == b"x" * 1000 and records[0].headers == (("h", b"1"),)


def test_build_refuses_what_append_and_the_constructor_set() -> None:
    builder = BatchBuilder()
    builder.append(b"v", timestamp=TS)
    for name in ("values", "timestamp", "compression"):
        with pytest.raises(TypeError, match=name):
            builder.build(**{name: None})
