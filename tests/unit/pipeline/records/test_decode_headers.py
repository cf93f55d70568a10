"""Record headers decode to what was encoded: short and long keys and values, null values, many headers."""

from __future__ import annotations

import random

import pytest

from pipeline.records import decode_batch, encode_batch
from pipeline.records.batch import CorruptBatchError


@pytest.mark.parametrize("seed", range(20))
def test_random_headers_round_trip(seed: int) -> None:
    rng = random.Random(seed)
    names = ["a", "lineage.source", "é" * 70, "x" * 200, ""]
    headers = []
    for _ in range(rng.randrange(1, 40)):
        count = rng.choice([0, 1, 3, 130])
        headers.append([(rng.choice(names), None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 5, 130])))
                        for _ in range(count)] or None)
    values = [rng.randbytes(rng.randrange(0, 300)) for _ in headers]
    _, records = decode_batch(encode_batch(values, headers=headers, compression=rng.choice([0, 3])))
    assert [r.value for r in records] == values
    assert [r.headers for r in records] == [tuple(h) if h else () for h in headers]


def test_a_header_key_that_is_not_utf8_is_corrupt() -> None:
    batch = bytearray(encode_batch([b"v"], headers=[[("kk", b"1")]]))
    at = batch.index(b"kk")
    batch[at : at + 2] = b"\xff\xfe"
    with pytest.raises(CorruptBatchError, match="UTF-8"):
        decode_batch(bytes(batch), check_crc=False)
