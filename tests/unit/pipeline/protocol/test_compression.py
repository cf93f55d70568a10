"""Compression codecs: round trips, the exact framings Kafka clients use, and interop with other libraries."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from kafka import codec as kafka_codec

from pipeline.protocol import compression
from pipeline.protocol.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CompressionError,
    UnknownCodecError,
    codec_from_name,
    compress,
    decompress,
)

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
TEXT = b"".join(b'{"member": %d, "page": "/jobs/search", "server": "app017.dc1"}\n' % i for i in range(3000))
SAMPLES = {
    "empty": b"",
    "one byte": b"x",
    "text": TEXT,
    "random": os.urandom(100_000),
    "bytearray": bytearray(TEXT[:5000]),
}


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_round_trip(codec: int, name: str) -> None:
    data = SAMPLES[name]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == bytes(data)
    assert decompress(codec, memoryview(packed)) == bytes(data)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_text_actually_shrinks(codec: int) -> None:
    assert len(compress(codec, TEXT)) < len(TEXT) // 3


@pytest.mark.parametrize("codec,level", [(GZIP, 1), (GZIP, 9), (ZSTD, 1), (ZSTD, 19), (LZ4, 1), (LZ4, 9)])
def test_levels(codec: int, level: int) -> None:
    assert decompress(codec, compress(codec, TEXT, level=level)) == TEXT


def test_codec_names() -> None:
    assert [codec_from_name(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [0, 1, 2, 3, 4]
    assert codec_from_name(" GZIP ") == GZIP
    assert compression.CODEC_NAMES[SNAPPY] == "snappy"
    with pytest.raises(UnknownCodecError):
        codec_from_name("brotli")
    with pytest.raises(UnknownCodecError):
        compress(5, b"data")
    with pytest.raises(UnknownCodecError):
        decompress(7, b"data")


def test_snappy_writes_xerial_framing() -> None:
    data = os.urandom(40_000) + TEXT  # more than two 32 KiB blocks
    packed = compress(SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    pos, blocks, out = 16, 0, b""
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        out += bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + size]))
        pos += 4 + size
        blocks += 1
    assert pos == len(packed)
    assert out == data
    assert blocks == -(-len(data) // compression.XERIAL_BLOCK_SIZE)


def test_snappy_reads_raw_blocks_and_kafka_python_framing() -> None:
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(TEXT))) == TEXT
    assert decompress(SNAPPY, kafka_codec.snappy_encode(TEXT)) == TEXT
    assert decompress(SNAPPY, kafka_codec.snappy_encode(TEXT, xerial_compatible=False)) == TEXT
    assert kafka_codec.snappy_decode(compress(SNAPPY, TEXT)) == TEXT


def test_snappy_reads_little_endian_xerial_version_fields() -> None:
    # Some writers store xerial's version/compat little-endian; the block layout is the same.
    packed = compress(SNAPPY, TEXT)
    swapped = packed[:8] + struct.pack("<ii", 1, 1) + packed[16:]
    assert decompress(SNAPPY, swapped) == TEXT


def test_truncated_xerial_stream_is_an_error() -> None:
    packed = compress(SNAPPY, TEXT)
    with pytest.raises(CompressionError):
        decompress(SNAPPY, packed[:-10])


def test_lz4_writes_kafkas_frame_settings() -> None:
    packed = compress(LZ4, TEXT)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # independent blocks
    assert not flg & 0x10  # no block checksums
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert bd == 0x40  # 64 KiB maximum block size
    assert lz4.frame.decompress(packed) == TEXT
    assert kafka_codec.lz4_decode(packed) == TEXT
    # The header checksum byte, as the reference implementation computes it for the same flags.
    reference = lz4.frame.compress(b"", block_linked=False, content_checksum=False, block_checksum=False, store_size=False)
    assert packed[:7] == reference[:7]


def test_lz4_incompressible_blocks_are_stored_raw() -> None:
    data = os.urandom(3 * compression.LZ4_BLOCK_SIZE + 5)
    packed = compress(LZ4, data)
    assert len(packed) == 7 + 4 * 4 + len(data) + 4  # header, 4 block sizes, the data, end mark
    assert lz4.frame.decompress(packed) == data


def test_lz4_reads_other_writers() -> None:
    assert decompress(LZ4, lz4.frame.compress(TEXT)) == TEXT  # content checksum, linked blocks
    assert decompress(LZ4, lz4.frame.compress(TEXT, store_size=True, block_linked=False)) == TEXT
    assert decompress(LZ4, kafka_codec.lz4_encode(TEXT)) == TEXT


def test_gzip_and_zstd_interop() -> None:
    assert gzip.decompress(compress(GZIP, TEXT)) == TEXT
    assert decompress(GZIP, gzip.compress(TEXT)) == TEXT
    assert decompress(GZIP, kafka_codec.gzip_encode(TEXT)) == TEXT
    assert zstandard.ZstdDecompressor().decompress(compress(ZSTD, TEXT)) == TEXT
    assert decompress(ZSTD, zstandard.ZstdCompressor().compress(TEXT)) == TEXT
    assert kafka_codec.zstd_decode(compress(ZSTD, TEXT)) == TEXT


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_garbage_is_a_compression_error(codec: int) -> None:
    with pytest.raises(CompressionError):
        decompress(codec, b"\x82SNAPPY\x00 this is not compressed data at all" if codec == SNAPPY else b"garbage!" * 4)


@pytest.mark.parametrize("seed", range(12))
def test_lz4_block_wise_reader_matches_the_reference_decoder(seed: int) -> None:
    import random

    rng = random.Random(seed)
    size = rng.choice([0, 1, 100, 5000, compression.LZ4_BLOCK_SIZE, 3 * compression.LZ4_BLOCK_SIZE + 17])
    data = bytes(rng.choice(b"abc \x00") if rng.random() < 0.8 else rng.randrange(256) for _ in range(size))
    ours = compress(LZ4, data)
    frames = [ours, lz4.frame.compress(data, block_linked=False, content_checksum=False, store_size=False),
              lz4.frame.compress(data, block_linked=False, block_size=lz4.frame.BLOCKSIZE_MAX256KB,
                                 content_checksum=False, store_size=False),
              lz4.frame.compress(data), kafka_codec.lz4_encode(data)]
    for frame in frames:
        assert decompress(LZ4, frame) == data
        assert decompress(LZ4, bytearray(frame)) == data
        assert decompress(LZ4, memoryview(frame)) == data


def test_lz4_block_wise_reader_refuses_broken_frames() -> None:
    packed = compress(LZ4, TEXT)
    for broken in (packed[:-4], packed[:-1], packed + b"\x00", packed[:7] + struct.pack("<I", 70_000) + packed[11:]):
        with pytest.raises(CompressionError):
            decompress(LZ4, broken)
