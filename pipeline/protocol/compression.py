"""Kafka's record compression codecs (the attributes bits 0-2 of a RecordBatch v2), backed by cramjam.

What each codec writes, matching what the Java client and librdkafka write and read:

* gzip: a gzip stream (RFC 1952).
* snappy: the xerial "snappy-java" block stream the Java client writes: a 16-byte header
  (0x82 ``SNAPPY`` 0x00, big-endian int32 version 1, int32 compatible version 1), then for every
  32 KiB of input a big-endian int32 length and a raw snappy block. Reading accepts that framing
  and also a bare raw snappy block, which some clients write.
* lz4: the standard LZ4 frame format (Kafka >= 0.10) with the settings Kafka's own writer uses:
  independent 64 KiB blocks, no block or content checksum, no content size.
* zstd: a zstd frame.
"""

from __future__ import annotations

import struct

import cramjam

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

# Levels the Java client uses when none is configured (Deflater default, zstd's default).
DEFAULT_GZIP_LEVEL = 6
DEFAULT_ZSTD_LEVEL = 3

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_MAGIC = XERIAL_HEADER[:8]
XERIAL_BLOCK_SIZE = 32 * 1024

_INT32 = struct.Struct(">i")

Buffer = bytes | bytearray | memoryview


class UnknownCodecError(ValueError):
    """A compression codec id or name that Kafka does not define."""


class CompressionError(ValueError):
    """Data that cannot be decompressed with the codec its batch declares."""


def codec_from_name(name: str) -> int:
    """Map a codec name as used in Kafka configs ("none", "gzip", "snappy", "lz4", "zstd") to its id."""
    try:
        return _CODEC_IDS[name.strip().lower()]
    except KeyError:
        raise UnknownCodecError(f"unknown compression codec {name!r}; expected one of {', '.join(_CODEC_IDS)}") from None


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` with the codec ``codec``; ``level`` None means the codec's Kafka default."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=DEFAULT_GZIP_LEVEL if level is None else level))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=DEFAULT_ZSTD_LEVEL if level is None else level))
    raise UnknownCodecError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress ``data`` written with ``codec``; raises CompressionError when it is not valid."""
    try:
        if codec == NONE:
            return bytes(data)
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            if bytes(data[:8]) == XERIAL_MAGIC and len(data) >= len(XERIAL_HEADER):
                return _xerial_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"cannot decompress {CODEC_NAMES[codec]} data: {exc}") from exc
    raise UnknownCodecError(f"unknown compression codec id {codec}")


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    pack = _INT32.pack
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: Buffer) -> bytes:
    # The version and compatible-version fields are not checked: some writers (e.g. Redpanda) have
    # stored them little-endian, and there has only ever been one block layout.
    view = memoryview(data)
    end = len(view)
    pos = len(XERIAL_HEADER)
    parts = []
    while pos < end:
        if pos + 4 > end:
            raise CompressionError(f"xerial snappy stream truncated in a block length at byte {pos}")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CompressionError(f"xerial snappy block at byte {pos - 4} declares {size} bytes, {end - pos} remain")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(parts)
