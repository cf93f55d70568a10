"""The primitive types of the Kafka protocol and how each is read and written.

Every type knows its classic form and its flexible ("compact") form: in flexible versions strings,
bytes, records and arrays carry an unsigned-varint length N+1 (0 = null) instead of an int16/int32
length (-1 = null). The schema compiler in :mod:`pipeline.protocol.codec` asks a type for a reader
``(buf, pos) -> (value, pos)`` and a writer ``(out, value) -> None`` once per field and version, so
nothing here runs per field lookup on the hot path except the returned closures.

Readers take a memoryview (or any buffer) and raise :class:`struct.error`, :class:`IndexError`,
:class:`UnicodeDecodeError` or :class:`DecodeError` on malformed input; the codec turns them into
its ProtocolError. Writers append to a :class:`Frame`.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Callable

Reader = Callable[[Any, int], "tuple[Any, int]"]
Writer = Callable[["Frame", Any], None]

INT8_S = struct.Struct(">b")
INT16_S = struct.Struct(">h")
INT32_S = struct.Struct(">i")
UINT32_S = struct.Struct(">I")

ZERO_UUID = uuid.UUID(int=0)


class DecodeError(ValueError):
    """Input bytes that do not fit the schema (bad length, null where not allowed, truncation)."""


class EncodeError(ValueError):
    """A body value that cannot be written for the field's type and version."""


class Frame(bytearray):
    """The bytearray a message is written into, plus the file regions placed inside it.

    ``regions`` holds ``(position, region)`` pairs: the region's ``size`` bytes go on the wire
    right at that position of the frame (used for records sent with os.sendfile).
    """

    __slots__ = ("regions",)

    def __init__(self, initial: bytes = b"") -> None:
        super().__init__(initial)
        self.regions: list[tuple[int, Any]] = []


# ---------------------------------------------------------------- unsigned varints (flexible lengths, tags)

def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """Read an unsigned LEB128 varint of at most 5 bytes (a uint32)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes")


def encode_uvarint(value: int) -> bytes:
    """The bytes of an unsigned varint."""
    if 0 <= value < 0x80:
        return _SMALL_UVARINTS[value]
    if value < 0 or value > 0xFFFFFFFF:
        raise EncodeError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_UVARINTS = [bytes((i,)) for i in range(0x80)]


def read_length(buf: Any, pos: int, compact: bool) -> tuple[int, int]:
    """Read a string/bytes/array length: int16/int32 classic or varint N+1 compact; -1 means null."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return INT32_S.unpack_from(buf, pos)[0], pos + 4


# ---------------------------------------------------------------- the types

class FieldType:
    """A protocol primitive: name, default, and factories for its reader and writer."""

    name: str = ""
    #: struct format character for fixed-size types (codec packs runs of them together), else None.
    fmt: str | None = None
    default: Any = None

    def reader(self, compact: bool, nullable: bool) -> Reader:
        """A function reading one value of this type."""
        s = struct.Struct(">" + self.fmt)
        unpack_from = s.unpack_from
        size = s.size

        def read(buf: Any, pos: int) -> tuple[Any, int]:
            return unpack_from(buf, pos)[0], pos + size

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        """A function appending one value of this type."""
        pack = struct.Struct(">" + self.fmt).pack

        def write(out: Frame, value: Any) -> None:
            out += pack(value)

        return write

    def __repr__(self) -> str:
        return self.name


class _Fixed(FieldType):
    def __init__(self, name: str, fmt: str, default: Any) -> None:
        self.name = name
        self.fmt = fmt
        self.default = default


INT8 = _Fixed("int8", "b", 0)
INT16 = _Fixed("int16", "h", 0)
INT32 = _Fixed("int32", "i", 0)
INT64 = _Fixed("int64", "q", 0)
UINT16 = _Fixed("uint16", "H", 0)
UINT32 = _Fixed("uint32", "I", 0)
FLOAT64 = _Fixed("float64", "d", 0.0)
BOOL = _Fixed("bool", "?", False)


class _Uuid(FieldType):
    name = "uuid"
    default = ZERO_UUID

    def reader(self, compact: bool, nullable: bool) -> Reader:
        def read(buf: Any, pos: int) -> tuple[uuid.UUID, int]:
            end = pos + 16
            if end > len(buf):
                raise DecodeError("truncated uuid")
            return uuid.UUID(bytes=bytes(buf[pos:end])), end

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        def write(out: Frame, value: Any) -> None:
            if isinstance(value, uuid.UUID):
                out += value.bytes
            elif isinstance(value, (bytes, bytearray, memoryview)) and len(value) == 16:
                out += value
            else:
                raise EncodeError(f"not a uuid: {value!r}")

        return write


UUID = _Uuid()


def _length_writer(compact: bool, short: bool) -> Callable[[Frame, int], None]:
    """Writes a length prefix (null = -1): uvarint N+1, int16 (strings) or int32."""
    if compact:
        def write_len(out: Frame, n: int) -> None:
            out += encode_uvarint(n + 1)
    else:
        pack = INT16_S.pack if short else INT32_S.pack

        def write_len(out: Frame, n: int) -> None:
            out += pack(n)

    return write_len


class _String(FieldType):
    name = "string"
    default = ""

    def reader(self, compact: bool, nullable: bool) -> Reader:
        int16_unpack = INT16_S.unpack_from

        def read(buf: Any, pos: int) -> tuple[str | None, int]:
            if compact:
                n, pos = read_uvarint(buf, pos)
                n -= 1
            else:
                n = int16_unpack(buf, pos)[0]
                pos += 2
            if n < 0:
                if n == -1 and nullable:
                    return None, pos
                raise DecodeError(f"invalid string length {n}")
            end = pos + n
            if end > len(buf):
                raise DecodeError("truncated string")
            return str(buf[pos:end], "utf-8"), end

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        write_len = _length_writer(compact, short=True)

        def write(out: Frame, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise EncodeError("null for a non-nullable string")
                write_len(out, -1)
                return
            data = value.encode("utf-8")
            write_len(out, len(data))
            out += data

        return write


STRING = _String()


class _Bytes(FieldType):
    """Opaque bytes; decoded as a zero-copy memoryview slice of the input."""

    name = "bytes"
    default = b""

    def reader(self, compact: bool, nullable: bool) -> Reader:
        def read(buf: Any, pos: int) -> tuple[memoryview | None, int]:
            n, pos = read_length(buf, pos, compact)
            if n < 0:
                if n == -1 and nullable:
                    return None, pos
                raise DecodeError(f"invalid {self.name} length {n}")
            end = pos + n
            if end > len(buf):
                raise DecodeError(f"truncated {self.name}")
            return buf[pos:end], end

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        write_len = _length_writer(compact, short=False)

        def write(out: Frame, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise EncodeError(f"null for a non-nullable {self.name} field")
                write_len(out, -1)
                return
            write_len(out, len(value))
            out += value

        return write


BYTES = _Bytes()


class _Records(_Bytes):
    """A record set: bytes-like, or on encode any object with an int ``size`` (a file region).

    A region is not copied: its position is noted in ``Frame.regions`` and the caller splices it
    into the output (the broker sends it with os.sendfile).
    """

    name = "records"
    default = None

    def writer(self, compact: bool, nullable: bool) -> Writer:
        write_len = _length_writer(compact, short=False)

        def write(out: Frame, value: Any) -> None:
            if value is None:
                write_len(out, -1)
            elif isinstance(value, (bytes, bytearray, memoryview)):
                write_len(out, len(value))
                out += value
            else:
                size = getattr(value, "size", None)
                if not isinstance(size, int) or size < 0:
                    raise EncodeError(f"records must be bytes-like or have an int size: {value!r}")
                write_len(out, size)
                out.regions.append((len(out), value))

        return write


RECORDS = _Records()

#: The primitive types by their name in Kafka's message specs.
PRIMITIVES: dict[str, FieldType] = {
    t.name: t for t in (INT8, INT16, INT32, INT64, UINT16, UINT32, FLOAT64, BOOL, UUID, STRING, BYTES, RECORDS)
}
