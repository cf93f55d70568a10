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
import threading
from typing import Iterator

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
        return _lz4_frame_compress(data, level)
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
            return _lz4_frame_decompress(data)
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"cannot decompress {CODEC_NAMES[codec]} data: {exc}") from exc
    raise UnknownCodecError(f"unknown compression codec id {codec}")


def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of a short input (under 16 bytes), as the LZ4 frame header checksum needs."""
    prime1, prime2, prime3, prime4, prime5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF
    if len(data) >= 16:
        raise ValueError("_xxh32 handles inputs shorter than 16 bytes only")
    h = (seed + prime5 + len(data)) & mask
    pos = 0
    while pos + 4 <= len(data):
        h = (h + int.from_bytes(data[pos : pos + 4], "little") * prime3) & mask
        h = (((h << 17) | (h >> 15)) & mask) * prime4 & mask
        pos += 4
    for byte in data[pos:]:
        h = (h + byte * prime5) & mask
        h = (((h << 11) | (h >> 21)) & mask) * prime1 & mask
    h ^= h >> 15
    h = h * prime2 & mask
    h ^= h >> 13
    h = h * prime3 & mask
    h ^= h >> 16
    return h


# Frame descriptor as Kafka's own LZ4 writer sets it: version 01, independent blocks, no block
# checksum, no content size, no content checksum; 64 KiB blocks; then the header checksum byte.
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_DESCRIPTOR = bytes((0x60, 0x40))
LZ4_FRAME_HEADER = LZ4_FRAME_MAGIC + _LZ4_DESCRIPTOR + bytes(((_xxh32(_LZ4_DESCRIPTOR) >> 8) & 0xFF,))
LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000
_UINT32_LE = struct.Struct("<I")


def _lz4_frame_compress(data: Buffer, level: int | None) -> bytes:
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if level is None or level < 3:
        options = {"mode": "default"}
    else:
        options = {"mode": "high_compression", "compression": level}
    parts = [LZ4_FRAME_HEADER]
    pack = _UINT32_LE.pack
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        chunk = view[start : start + LZ4_BLOCK_SIZE]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False, **options))
        if len(block) < len(chunk):
            parts.append(pack(len(block)))
            parts.append(block)
        else:
            parts.append(pack(len(chunk) | _LZ4_UNCOMPRESSED_BLOCK))
            parts.append(bytes(chunk))
    parts.append(b"\x00\x00\x00\x00")  # end mark
    return b"".join(parts)


# FLG bits the block-wise reader handles: version 01 and independent blocks; anything else (linked blocks, block or
# content checksums, a content size, a dictionary id) goes to cramjam's frame decoder.
_LZ4_PLAIN_FLG = 0x60
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_lz4_buffers = threading.local()


def _lz4_frame_decompress(data: Buffer) -> bytes:
    """An LZ4 frame's content. Frames as Kafka's writer (and ours) writes them are read block by block straight
    into a reused buffer with cramjam's block decoder (about 3x cheaper than its frame decoder, which allocates
    and checks as it goes); other frames go to that frame decoder."""
    view = memoryview(data)
    if len(view) < 11 or view[:4] != LZ4_FRAME_MAGIC or view[4] != _LZ4_PLAIN_FLG or view[5] & 0x8F:
        return bytes(cramjam.lz4.decompress(data))
    block_max = _LZ4_BLOCK_MAX.get(view[5] >> 4)
    if block_max is None:
        return bytes(cramjam.lz4.decompress(data))
    out = getattr(_lz4_buffers, "out", None)
    if out is None or len(out) < block_max:
        out = _lz4_buffers.out = bytearray(block_max)
    parts = []
    pos = 7
    end = len(view)
    unpack = _UINT32_LE.unpack_from
    decompress_into = cramjam.lz4.decompress_block_into
    while True:
        if pos + 4 > end:
            raise CompressionError("lz4 frame truncated: no end mark")
        (size,) = unpack(view, pos)
        pos += 4
        if size == 0:
            break
        stored = size & _LZ4_UNCOMPRESSED_BLOCK
        size &= ~_LZ4_UNCOMPRESSED_BLOCK
        if size > block_max or pos + size > end:
            raise CompressionError(f"lz4 block at byte {pos - 4} declares {size} bytes, {end - pos} remain")
        if stored:
            parts.append(bytes(view[pos : pos + size]))
        else:
            written = decompress_into(view[pos : pos + size], out)
            parts.append(bytes(memoryview(out)[:written]))
        pos += size
    if pos != end:
        raise CompressionError(f"lz4 frame has {end - pos} bytes after its end mark")
    return parts[0] if len(parts) == 1 else b"".join(parts)


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
    return b"".join([bytes(cramjam.snappy.decompress_raw(block)) for block in xerial_blocks(data)])


def xerial_blocks(data: Buffer) -> Iterator[memoryview]:
    """The raw snappy blocks of a xerial snappy stream (``data`` starts with XERIAL_HEADER)."""
    # The version and compatible-version fields are not checked: some writers (e.g. Redpanda) have
    # stored them little-endian, and there has only ever been one block layout.
    view = memoryview(data)
    end = len(view)
    pos = len(XERIAL_HEADER)
    while pos < end:
        if pos + 4 > end:
            raise CompressionError(f"xerial snappy stream truncated in a block length at byte {pos}")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CompressionError(f"xerial snappy block at byte {pos - 4} declares {size} bytes, {end - pos} remain")
        yield view[pos : pos + size]
        pos += size
