"""Decompression with a ceiling on its output, for data from peers that cannot be trusted (the broker
checking a producer's batch): a few KiB of gzip, lz4 or zstd can claim gigabytes.

Where a codec's framing bounds what it holds (snappy's block lengths, lz4's and zstd's block counts
and sizes) that bound is read first and ordinary decompression follows when it fits. gzip is
inflated with zlib's output limit. Anything whose framing allows more than the ceiling is
decompressed into an anonymous mapping of the ceiling's size, whose pages are only committed as
they are written, so memory never grows past the ceiling.
"""

from __future__ import annotations

import mmap
import struct
import zlib

import cramjam

from .compression import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    LZ4_FRAME_MAGIC,
    SNAPPY,
    XERIAL_HEADER,
    XERIAL_MAGIC,
    ZSTD,
    Buffer,
    CompressionError,
    decompress,
    xerial_blocks,
)

_UINT32_LE = struct.Struct("<I")
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 << 10
_GZIP_WINDOW = 16 + zlib.MAX_WBITS


def decompress_at_most(codec: int, data: Buffer, max_size: int) -> bytes:
    """Decompress ``data`` written with ``codec``; CompressionError when it is invalid or holds more
    than ``max_size`` bytes, found out without holding more than that in memory."""
    if codec not in (GZIP, SNAPPY, LZ4, ZSTD):
        return decompress(codec, data)  # no compression, or UnknownCodecError
    if codec == GZIP:
        return _gunzip(data, max_size)
    bound = size_bound(codec, data, max_size)
    if bound is not None and bound <= max_size:
        return decompress(codec, data)
    if codec == SNAPPY:
        raise CompressionError(f"snappy data holds {bound} bytes, over {max_size}")
    return _into_mapping(codec, data, max_size)


def size_bound(codec: int, data: Buffer, stop_above: int | None = None) -> int | None:
    """At least what snappy, lz4 or zstd ``data`` decompresses to, read from its framing alone (exact
    for snappy); None when the framing is not one this reads. Reading stops as soon as the bound
    passes ``stop_above``, returning what it has reached."""
    limit = (1 << 63) if stop_above is None else stop_above
    try:
        if codec == SNAPPY:
            if bytes(data[:8]) == XERIAL_MAGIC and len(data) >= len(XERIAL_HEADER):
                return sum(map(cramjam.snappy.decompress_raw_len, xerial_blocks(data)))
            return cramjam.snappy.decompress_raw_len(data)
        if codec == LZ4:
            return _lz4_bound(memoryview(data), limit)
        if codec == ZSTD:
            return _zstd_bound(memoryview(data), limit)
    except (cramjam.DecompressionError, IndexError, struct.error):
        return None
    return None


def _lz4_bound(view: memoryview, limit: int) -> int | None:
    """Blocks times their declared maximum size, over every frame (LZ4 frame format)."""
    end = len(view)
    pos = 0
    total = 0
    while pos < end and total <= limit:
        if bytes(view[pos : pos + 4]) != LZ4_FRAME_MAGIC:
            return None
        flags, block_descriptor = view[pos + 4], view[pos + 5]
        block_max = _LZ4_BLOCK_MAX.get((block_descriptor >> 4) & 7)
        if block_max is None:
            return None
        # descriptor, content size and dictionary id when flagged, header checksum
        pos += 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1
        block_checksum = 4 if flags & 0x10 else 0
        while total <= limit:
            (size,) = _UINT32_LE.unpack_from(view, pos)
            pos += 4
            if size == 0:
                break
            pos += (size & 0x7FFFFFFF) + block_checksum
            total += block_max
        pos += 4 if flags & 0x04 else 0  # content checksum
    return total


def _zstd_bound(view: memoryview, limit: int) -> int | None:
    """Raw and RLE block sizes plus 128 KiB per compressed block, over every frame (RFC 8878)."""
    end = len(view)
    pos = 0
    total = 0
    while pos < end and total <= limit:
        (magic,) = _UINT32_LE.unpack_from(view, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame
            pos += 8 + _UINT32_LE.unpack_from(view, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            return None
        descriptor = view[pos + 4]
        single_segment = descriptor & 0x20
        content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3] + content_size_bytes
        while True:
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            pos += 3
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 0:  # raw
                total += size
                pos += size
            elif kind == 1:  # RLE: one byte repeated size times
                total += size
                pos += 1
            elif kind == 2:
                total += _ZSTD_BLOCK_MAX
                pos += size
            else:
                return None
            if header & 1 or total > limit:
                break
        pos += 4 if descriptor & 0x04 else 0  # content checksum
    return total


def _gunzip(data: Buffer, max_size: int) -> bytes:
    parts = []
    room = max_size
    rest = bytes(data)
    try:
        while rest:
            inflater = zlib.decompressobj(_GZIP_WINDOW)
            part = inflater.decompress(rest, room + 1)
            room -= len(part)
            if room < 0:
                raise CompressionError(f"gzip data holds more than {max_size} bytes")
            if not inflater.eof:
                raise CompressionError("gzip data ends inside a member")
            parts.append(part)
            rest = inflater.unused_data
    except zlib.error as exc:
        raise CompressionError(f"cannot decompress gzip data: {exc}") from None
    return b"".join(parts)


def _into_mapping(codec: int, data: Buffer, max_size: int) -> bytes:
    module = cramjam.lz4 if codec == LZ4 else cramjam.zstd
    with mmap.mmap(-1, max(max_size, 1)) as room:
        try:
            size = module.decompress_into(data, room)
        except cramjam.DecompressionError as exc:
            raise CompressionError(f"{CODEC_NAMES[codec]} data does not decompress into {max_size} bytes: {exc}") from None
        return room[:size]
