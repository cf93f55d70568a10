"""Zigzag varints and varlongs, the integers of a v2 record (Kafka's ByteUtils varint functions).

Every length, delta and count in a record is a zigzag varint: n is mapped to (n << 1) ^ (n >> 63)
and written seven bits at a time, low bits first, the high bit of each byte saying another follows.
Encoding goes through a table of ready-made encodings; decoding through ``read_varint``, whose one-
and two-byte cases come first. The per-record loops of decode and validate, the hot paths of the
clients and the broker, inline those cases themselves (a call per field costs more than the rest of
the loop); ``ZIGZAG_BYTE`` is what they index.
"""

from __future__ import annotations

from pipeline.records.batch import CorruptBatchError

# A cache bound: encodings are kept for at most this many integers.
MAX_CACHE_ENTRIES = 1 << 18

# ZIGZAG_BYTE[b]: the value of the one-byte varint b (b < 0x80).
ZIGZAG_BYTE = [(b >> 1) ^ -(b & 1) for b in range(128)]


def zigzag_varint(n: int) -> bytes:
    """Encode a signed 64-bit integer as a zigzag varint (uncached; see ``encode_varint``)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


class _VarintTable(dict):
    """int -> zigzag varint bytes, filled on first use (bounded, then computed without storing)."""

    def __missing__(self, n: int) -> bytes:
        encoded = zigzag_varint(n)
        if len(self) < MAX_CACHE_ENTRIES:
            self[n] = encoded
        return encoded


# VARINT[n]: the encoding of n, precomputed for -64 .. 2**14 - 1.
VARINT = _VarintTable((n, zigzag_varint(n)) for n in range(-64, 1 << 14))
encode_varint = VARINT.__getitem__


def varint_size(n: int) -> int:
    """Bytes the zigzag varint of ``n`` takes."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z > 0x7F:
        z >>= 7
        size += 1
    return size


def read_varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint at ``pos``; return (value, position after it).

    Raises IndexError when ``data`` ends inside it and CorruptBatchError when it runs past 10 bytes.
    """
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    c = data[pos + 1]
    if c < 0x80:
        z = (b & 0x7F) | (c << 7)
        return (z >> 1) ^ -(z & 1), pos + 2
    z = (b & 0x7F) | ((c & 0x7F) << 7)
    shift = 14
    pos += 2
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatchError(f"varint longer than 10 bytes at byte {pos}")
