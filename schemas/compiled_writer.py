"""A record schema compiled into one Python function that writes a record's Avro binary encoding.

fastavro's `schemaless_writer` interprets the schema for every record it writes (field by field, with its
logical-type and union handling): about 10 us for one of our events. `compile_writer(schema)` turns a schema
built of records, the primitive types and two-branch unions with null into straight-line code: one bytes join
per record, strings of a small vocabulary taken from a bounded cache. It returns None for a schema using
anything else (enums, arrays, maps, fixed, wider unions), which the caller then writes with fastavro.

Logical types are written as their underlying type (a uuid as its string, a timestamp-millis as its long):
the compiled function takes the underlying values only, and raises (TypeError, AttributeError, KeyError,
ValueError, OverflowError, struct.error) for anything else, so that the caller can hand such a record to
fastavro, which converts what it accepts and refuses the rest with its own error. A field missing from the
record takes its default, as with fastavro.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Mapping

__all__ = ["WRITE_ERRORS", "compile_writer"]

WRITE_ERRORS = (TypeError, AttributeError, KeyError, ValueError, OverflowError, struct.error)
"""What a compiled writer raises for a record it cannot write (fastavro decides about those)."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})

_CACHE_LIMIT = 4096
_UNCACHED_LOGICAL = frozenset({"uuid"})
"""Logical types of strings that are (nearly) all different: not worth caching."""
_INT_MIN, _LONG_MIN = -(1 << 31), -(1 << 63)
_INT_MAX, _LONG_MAX = (1 << 31) - 1, (1 << 63) - 1


def _varint_table(continued: bool) -> list[bytes]:
    """The varints of 0..2**14 - 1; `continued`: as the first 14 bits of a longer one (always 2 bytes)."""
    table = []
    for z in range(1 << 14):
        if continued or z >= 0x80:
            table.append(bytes(((z & 0x7F) | 0x80, (z >> 7) | (0x80 if continued else 0))))
        else:
            table.append(bytes((z,)))
    return table


_VARINT, _VARINT_MORE = _varint_table(False), _varint_table(True)


def _long(n: int) -> bytes:
    """An Avro long: zigzag, then a varint of 7 bits a byte, 14 bits at a time from tables."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x4000:
        return _VARINT[z]
    if z < 1 << 28:
        return _VARINT_MORE[z & 0x3FFF] + _VARINT[z >> 14]
    if z < 1 << 42:
        return _VARINT_MORE[z & 0x3FFF] + _VARINT_MORE[(z >> 14) & 0x3FFF] + _VARINT[z >> 28]
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise OverflowError(f"{n} is out of the range of an Avro long")
    out = b""
    while z >= 0x4000:
        out += _VARINT_MORE[z & 0x3FFF]
        z >>= 14
    return out + _VARINT[z]


def _int(n: int) -> bytes:
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{n!r} is out of the range of an Avro int")
    return _long(n)


def _string(s: str) -> bytes:
    data = s.encode()
    n = len(data)
    return (_VARINT[n << 1] if n < 0x2000 else _long(n)) + data


def _bytes(b: bytes) -> bytes:
    if type(b) is not bytes:
        raise TypeError(f"Avro bytes must be bytes, not {type(b).__name__}")
    n = len(b)
    return (_VARINT[n << 1] if n < 0x2000 else _long(n)) + b


def _boolean(b: bool) -> bytes:
    if type(b) is not bool:
        raise TypeError(f"an Avro boolean must be a bool, not {type(b).__name__}")
    return b"\x01" if b else b"\x00"


def _null(v: None) -> bytes:
    if v is not None:
        raise TypeError(f"an Avro null must be None, not {type(v).__name__}")
    return b""


def _cached_string(cache: dict[str, bytes]) -> Callable[[str], bytes]:
    """`_string` remembering up to _CACHE_LIMIT strings (then starting over): for fields of a small vocabulary."""
    get = cache.get

    def write(s: str) -> bytes:
        found = get(s)
        if found is None:
            if type(s) is not str:
                raise TypeError(f"an Avro string must be a str, not {type(s).__name__}")
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            found = cache[s] = _string(s)
        return found
    return write


_FLOAT, _DOUBLE = struct.Struct("<f").pack, struct.Struct("<d").pack


def _float(x: float) -> bytes:
    if type(x) is not float and type(x) is not int:
        raise TypeError(f"an Avro float must be a number, not {type(x).__name__}")
    return _FLOAT(x)


def _double(x: float) -> bytes:
    if type(x) is not float and type(x) is not int:
        raise TypeError(f"an Avro double must be a number, not {type(x).__name__}")
    return _DOUBLE(x)


_WRITERS: dict[str, Callable[[Any], bytes]] = {
    "null": _null, "boolean": _boolean, "int": _int, "long": _long, "float": _float, "double": _double,
    "bytes": _bytes, "string": _string,
}


class _Unsupported(Exception):
    """The schema uses something the compiler leaves to fastavro."""


class _Compiler:
    """Emits, for one record schema, the expressions whose bytes joined make a record's encoding."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self.constants: dict[str, Any] = {}
        self.records: dict[str, Mapping[str, Any]] = {}
        self.lines: list[str] = []
        self.variables = 0

    def constant(self, value: Any) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def variable(self) -> str:
        self.variables += 1
        return f"v{self.variables}"

    def parts(self, schema: Any, value: str, namespace: str | None) -> list[str]:
        """Expressions (in order) of the encoding of `value` (a variable name) under `schema`; may emit lines."""
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return [f"{self.constant(_WRITERS[schema])}({value})"]
            full = schema if "." in schema or namespace is None else f"{namespace}.{schema}"
            named = self.records.get(full, self.records.get(schema))
            if named is None:
                raise _Unsupported(f"named type {schema}")
            return self.parts(named, value, namespace)
        if isinstance(schema, list):
            return self.union(schema, value, namespace)
        kind = schema.get("type")
        if kind == "record":
            return self.record(schema, value, namespace)
        if kind == "string" and schema.get("logicalType") not in _UNCACHED_LOGICAL:
            return [f"{self.constant(_cached_string({}))}({value})"]
        if kind in _PRIMITIVES:
            return [f"{self.constant(_WRITERS[kind])}({value})"]
        if isinstance(kind, (dict, list)):
            return self.parts(kind, value, namespace)
        raise _Unsupported(f"type {kind!r}")

    def record(self, schema: Mapping[str, Any], value: str, namespace: str | None) -> list[str]:
        name = schema["name"]
        namespace = schema.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        self.records[full] = schema
        parts = []
        for field in schema["fields"]:
            field_value = self.variable()
            if "default" in field:
                self.lines.append(f"{field_value} = {value}.get({field['name']!r}, {self.constant(field['default'])})")
            else:
                self.lines.append(f"{field_value} = {value}[{field['name']!r}]")
            parts.extend(self.parts(field["type"], field_value, namespace))
        return parts

    def union(self, branches: list, value: str, namespace: str | None) -> list[str]:
        if len(branches) != 2 or "null" not in branches:
            raise _Unsupported("a union other than of null and one type")
        other = 1 - branches.index("null")
        lines = len(self.lines)
        inner = self.parts(branches[other], value, namespace)
        if len(inner) != 1 or len(self.lines) != lines:
            raise _Unsupported("a union with a record")
        tag_null, tag_other = _VARINT[(1 - other) << 1], _VARINT[other << 1]
        return [f"({tag_null!r} if {value} is None else {tag_other!r} + {inner[0]})"]


def compile_writer(schema: Mapping[str, Any], prefix: bytes = b"") -> Callable[[Mapping[str, Any]], bytes] | None:
    """A function writing a record of `schema` (a record schema, as JSON-decoded) in Avro binary encoding after
    `prefix`: the bytes fastavro's schemaless_writer writes for it; None if the schema uses what the compiler does
    not handle."""
    compiler = _Compiler()
    try:
        parts = compiler.parts(dict(schema), "record", None)
    except _Unsupported:
        return None
    if schema.get("type") != "record":
        return None
    body = "".join(f"    {line}\n" for line in compiler.lines)
    if prefix:
        parts.insert(0, compiler.constant(prefix))
    source = f"def write(record):\n{body}    return b''.join(({', '.join(parts)},))\n"
    namespace: dict[str, Any] = dict(compiler.constants)
    exec(compile(source, f"<avro writer of {schema.get('name')}>", "exec"), namespace)  # noqa: S102
    return namespace["write"]
