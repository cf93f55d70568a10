"""Zigzag varints (pipeline.records.varint) against kafka-python's, at every size boundary."""

from __future__ import annotations

import pytest
from kafka.record.util import decode_varint, encode_varint as kafka_encode_varint

from pipeline.records.batch import CorruptBatchError
from pipeline.records.varint import (
    VARINT,
    ZIGZAG_BYTE,
    encode_varint,
    read_varint,
    varint_size,
    zigzag_varint,
)

BOUNDARIES = [0, -1, 1, 63, -64, 64, -65, 8191, -8192, 8192, -8193, (1 << 20) - 1, 1 << 20, (1 << 31) - 1,
              -(1 << 31), (1 << 62), -(1 << 63), (1 << 63) - 1]


def kafka(n: int) -> bytes:
    out = bytearray()
    kafka_encode_varint(n, out.append)
    return bytes(out)


@pytest.mark.parametrize("n", BOUNDARIES)
def test_encoding_matches_kafka_python(n: int) -> None:
    assert zigzag_varint(n) == kafka(n)
    assert encode_varint(n) == kafka(n)
    assert varint_size(n) == len(kafka(n))


@pytest.mark.parametrize("n", BOUNDARIES)
def test_read_returns_value_and_next_position(n: int) -> None:
    data = b"\xff" + kafka(n) + b"tail"
    assert read_varint(data, 1) == (n, 1 + len(kafka(n)))
    assert read_varint(memoryview(data), 1) == (n, 1 + len(kafka(n)))
    assert decode_varint(bytearray(kafka(n)), 0)[0] == n


def test_the_one_byte_table_is_the_zigzag_of_every_short_varint() -> None:
    assert [ZIGZAG_BYTE[b] for b in range(128)] == [read_varint(bytes([b]), 0)[0] for b in range(128)]
    assert ZIGZAG_BYTE[:4] == [0, -1, 1, -2]


def test_the_table_caches_what_it_encodes_outside_its_precomputed_range() -> None:
    n = (1 << 40) + 12345
    assert encode_varint(n) == kafka(n)
    assert VARINT[n] == kafka(n)


def test_a_varint_cut_short_raises_index_error() -> None:
    with pytest.raises(IndexError):
        read_varint(b"\x80", 0)
    with pytest.raises(IndexError):
        read_varint(b"\x80\x80\x80", 0)


def test_a_varint_longer_than_ten_bytes_is_corrupt() -> None:
    with pytest.raises(CorruptBatchError, match="longer than 10 bytes"):
        read_varint(b"\x80" * 10 + b"\x00", 0)
    # ten bytes is the most a varlong takes, and is read
    assert read_varint(kafka(-(1 << 63)), 0) == (-(1 << 63), 10)
