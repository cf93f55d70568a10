"""The one encoder/decoder of the Kafka protocol, interpreting the declarations in messages.py.

Each (api, version, request|response) declaration is compiled into a reader and a writer the first
time it is used (two threads racing to it compile the same functions; either result serves): for
each struct a small Python function is generated from the declaration (runs of consecutive
fixed-size fields become one precomputed ``struct.Struct`` call, the decoded dict is one
literal), nested structs and arrays get their own compiled readers/writers, and flexible
versions get compact lengths and a tagged-fields section. The public functions below frame and
unframe whole requests and responses (headers included) for the broker and the clients.

Bodies are dicts keyed by Kafka's field names in snake_case. Decoding yields every field of the
version (bytes/records as zero-copy memoryview slices). Encoding ignores keys the version lacks and
uses each field's default for keys the dict omits. A records value on encode may be a file region
(any object with an int ``size``): it is not copied but returned as its own chunk.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, NamedTuple

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.messages import APIS
from pipeline.protocol.schema import Field
from pipeline.protocol.types import (
    INT16_S,
    INT32_S,
    DecodeError,
    EncodeError,
    Frame,
    Reader,
    Writer,
    encode_uvarint,
    read_length,
    read_uvarint,
)

__all__ = [
    "ProtocolError",
    "RequestHeader",
    "SUPPORTED_VERSIONS",
    "decode_request",
    "decode_response",
    "DataCodec",
    "encode_request",
    "encode_response",
    "is_flexible",
    "read_request_header",
]


class ProtocolError(ValueError):
    """Malformed bytes, an unsupported api key/version, or a body that cannot be encoded."""


class RequestHeader(NamedTuple):
    """A decoded request header; ``size`` is the number of bytes it occupied."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int


# ---------------------------------------------------------------- compiling declarations

_StructReader = Callable[[Any, int], "tuple[dict, int]"]
_StructWriter = Callable[[Frame, dict], None]


def _value_reader(field: Field, version: int, flexible: bool) -> Reader:
    """Reader of one field's value (primitive, struct, or array of either) in classic/compact form."""
    nullable = field.nullable_in(version)
    if field.is_array:
        if field.is_struct_like:
            element = _compile_struct_reader(field.fields, version, flexible)
        else:
            element = field.primitive.reader(flexible, False)
        fixed = None if field.is_struct_like else field.primitive.fmt
        return _array_reader(field.key, element, fixed, flexible, nullable)
    if field.is_struct_like:
        return _compile_struct_reader(field.fields, version, flexible)
    return field.primitive.reader(flexible, nullable)


def _array_reader(name: str, element: Reader, fixed: str | None, compact: bool, nullable: bool) -> Reader:
    fixed_size = struct.calcsize(">" + fixed) if fixed else 0

    def read(buf: Any, pos: int) -> tuple[list | None, int]:
        n, pos = read_length(buf, pos, compact)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise DecodeError(f"invalid array length {n} for {name}")
        if n > len(buf) - pos:
            raise DecodeError(f"array {name} of {n} elements exceeds the frame")
        if fixed:
            end = pos + n * fixed_size
            return list(struct.unpack_from(">%d%s" % (n, fixed), buf, pos)), end
        items = []
        append = items.append
        for _ in range(n):
            item, pos = element(buf, pos)
            append(item)
        return items, pos

    return read


def _is_fixed(field: Field) -> bool:
    return not field.is_array and not field.is_struct_like and field.primitive.fmt is not None


class _Source:
    """Python source of one compiled function, and the objects it refers to by name."""

    def __init__(self, header: str) -> None:
        self.lines = [header]
        self.namespace: dict[str, Any] = {}

    def ref(self, obj: Any) -> str:
        """A name under which the generated code sees ``obj``."""
        name = f"_{len(self.namespace)}"
        self.namespace[name] = obj
        return name

    def add(self, line: str) -> None:
        self.lines.append("    " + line)

    def build(self, name: str) -> Callable:
        exec("\n".join(self.lines), self.namespace)  # noqa: S102 - source built from our declarations
        return self.namespace[name]


def _split_fields(fields: tuple[Field, ...], version: int, flexible: bool) -> tuple[list[list[Field]], list[Field]]:
    """The version's regular fields grouped into runs (consecutive fixed-size fields share a run;
    every other field is a run of one), and its tagged fields by ascending tag."""
    present = [f for f in fields if f.exists_in(version)]
    tagged = sorted((f for f in present if flexible and f.tagged_in(version)), key=lambda f: f.tag)
    runs: list[list[Field]] = []
    for f in present:
        if flexible and f.tagged_in(version):
            continue
        if _is_fixed(f) and runs and _is_fixed(runs[-1][0]):
            runs[-1].append(f)
        else:
            runs.append([f])
    return runs, tagged


def _compile_struct_reader(fields: tuple[Field, ...], version: int, flexible: bool) -> _StructReader:
    """Generate ``read(buf, pos) -> (dict, pos)`` for one struct at one version.

    Each run of fixed-size fields is one ``unpack_from``; the dict is built in one literal.
    """
    runs, tagged = _split_fields(fields, version, flexible)
    src = _Source("def read(buf, pos):")
    items: list[str] = []
    for run in runs:
        names = [f"v{len(items) + i}" for i in range(len(run))]
        items.extend(f"{f.key!r}: {name}" for f, name in zip(run, names))
        if _is_fixed(run[0]):
            s = struct.Struct(">" + "".join(f.primitive.fmt for f in run))
            src.add(f"{', '.join(names)}, = {src.ref(s.unpack_from)}(buf, pos)")
            src.add(f"pos += {s.size}")
        else:
            src.add(f"{names[0]}, pos = {src.ref(_value_reader(run[0], version, flexible))}(buf, pos)")
    src.add(f"d = {{{', '.join(items)}}}")
    if flexible:
        by_tag = {f.tag: (f.key, _value_reader(f, version, True)) for f in tagged}
        defaults = tuple((f.key, f.default_factory(version)) for f in tagged)
        src.add(f"pos = {src.ref(_read_tagged)}(buf, pos, d, {src.ref(by_tag)}, {src.ref(defaults)})")
    src.add("return d, pos")
    return src.build("read")


def _read_tagged(buf: Any, pos: int, d: dict, by_tag: dict, defaults: tuple) -> int:
    """Read a tagged-fields section into ``d``; absent known fields get their default."""
    for key, make in defaults:
        d[key] = make()
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise DecodeError("truncated tagged field")
        known = by_tag.get(tag)
        if known is not None:
            key, read_value = known
            d[key], used = read_value(buf[:end], pos)
            if used != end:
                raise DecodeError(f"tagged field {key} has {end - used} stray bytes")
        pos = end
    return pos


def _value_writer(field: Field, version: int, flexible: bool) -> Writer:
    nullable = field.nullable_in(version)
    if field.is_array:
        if field.is_struct_like:
            element = _compile_struct_writer(field.fields, version, flexible)
            fixed = None
        else:
            element = field.primitive.writer(flexible, False)
            fixed = field.primitive.fmt
        return _array_writer(field.key, element, fixed, flexible, nullable)
    if field.is_struct_like:
        return _compile_struct_writer(field.fields, version, flexible)
    return field.primitive.writer(flexible, nullable)


def _array_writer(name: str, element: Writer, fixed: str | None, compact: bool, nullable: bool) -> Writer:
    int32_pack = INT32_S.pack

    def write(out: Frame, items: Any) -> None:
        if items is None:
            if not nullable:
                raise EncodeError(f"null for the non-nullable array {name}")
            out += b"\x00" if compact else b"\xff\xff\xff\xff"
            return
        n = len(items)
        out += encode_uvarint(n + 1) if compact else int32_pack(n)
        if fixed:
            out += struct.pack(">%d%s" % (n, fixed), *items)
        else:
            for item in items:
                element(out, item)

    return write


def _compile_struct_writer(fields: tuple[Field, ...], version: int, flexible: bool) -> _StructWriter:
    """Generate ``write(out, d)`` for one struct at one version.

    Each run of fixed-size fields is one ``pack``; omitted keys take the field's default
    (writers never mutate values, so one shared default object per field is enough).
    """
    runs, tagged = _split_fields(fields, version, flexible)
    src = _Source("def write(out, d):")
    src.add("get = d.get")
    for run in runs:
        args = ", ".join(f"get({f.key!r}, {src.ref(f.default_factory(version)())})" for f in run)
        if _is_fixed(run[0]):
            s = struct.Struct(">" + "".join(f.primitive.fmt for f in run))
            src.add(f"out += {src.ref(s.pack)}({args})")
        else:
            src.add(f"{src.ref(_value_writer(run[0], version, flexible))}(out, {args})")
    if flexible:
        entries = tuple((f.tag, f.key, f.default_factory(version)(), _value_writer(f, version, True))
                        for f in tagged)
        src.add(f"{src.ref(_write_tagged)}(out, d, {src.ref(entries)})")
    return src.build("write")


def _write_tagged(out: Frame, d: dict, tagged: tuple) -> None:
    """The tagged-fields section: fields whose value differs from the default, by ascending tag."""
    chosen = []
    for tag, key, default, write_value in tagged:
        value = d.get(key, default)
        if value != default:
            chosen.append((tag, value, write_value))
    out += encode_uvarint(len(chosen))
    for tag, value, write_value in chosen:
        body = Frame()
        write_value(body, value)
        if body.regions:
            raise EncodeError("file regions cannot travel in tagged fields")
        out += encode_uvarint(tag)
        out += encode_uvarint(len(body))
        out += body


class _Codec(NamedTuple):
    read: _StructReader
    write: _StructWriter


class _CodecTable(dict):
    """(api key, version) -> _Codec of its requests or of its responses, each compiled on first use: a process
    pays only for the few APIs it speaks (compiling every declaration took a third of a second at import)."""

    def __init__(self, side: str) -> None:
        super().__init__()
        self._side = side

    def __missing__(self, key: tuple[int, int]) -> _Codec:
        flex = _FLEXIBLE[key]  # KeyError: not a version we declare
        fields = getattr(APIS[key[0]], self._side)
        codec = self[key] = _Codec(_compile_struct_reader(fields, key[1], flex),
                                   _compile_struct_writer(fields, key[1], flex))
        return codec


def _declared_versions() -> tuple[dict[int, tuple[int, int]], dict[tuple[int, int], bool]]:
    supported: dict[int, tuple[int, int]] = {}
    flexible: dict[tuple[int, int], bool] = {}
    for key, api in APIS.items():
        versions = api.version_range
        supported[key] = (versions.low, versions.high)
        for v in versions:
            flexible[(key, v)] = api.is_flexible(v)
    return supported, flexible


_SUPPORTED, _FLEXIBLE = _declared_versions()
_REQUESTS, _RESPONSES = _CodecTable("request"), _CodecTable("response")

#: api key -> (min version, max version) we support, derived from the declarations.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = _SUPPORTED

_DECODE_ERRORS = (struct.error, IndexError, UnicodeDecodeError, DecodeError)
_ENCODE_ERRORS = (struct.error, EncodeError, TypeError, AttributeError, OverflowError)
_HEADER_S = struct.Struct(">hhi")
_API_VERSIONS = int(ApiKey.API_VERSIONS)


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this (api, version) uses flexible encoding; False for unknown ones."""
    return _FLEXIBLE.get((api_key, api_version), False)


def _codec(table: _CodecTable, api_key: int, api_version: int) -> _Codec:
    try:
        return table[(api_key, api_version)]
    except KeyError:
        if (api_key, api_version) in _FLEXIBLE:
            raise  # a declared version that failed to compile: a bug in its declaration, not the client's request
        if api_key in _SUPPORTED:
            raise ProtocolError(f"unsupported version {api_version} of api {api_key}") from None
        raise ProtocolError(f"unknown api key {api_key}") from None


def _as_view(buf: Any) -> memoryview:
    return buf if isinstance(buf, memoryview) else memoryview(buf)


class DataCodec:
    """A versioned data struct outside any request (Kafka's ``"type": "data"`` specs, such as the
    consumer protocol's Subscription): an int16 version, then the fields of that version.

    A version above ``latest`` is read with the latest layout (such specs only ever append fields,
    so the newer trailing fields are left unread), as Kafka's ConsumerProtocol does.
    """

    def __init__(self, name: str, fields: tuple[Field, ...], latest: int) -> None:
        self.name = name
        self.fields = fields
        self.latest = latest
        self._codecs = [_Codec(_compile_struct_reader(fields, v, False), _compile_struct_writer(fields, v, False))
                        for v in range(latest + 1)]

    def encode(self, body: dict, version: int) -> bytes:
        """The int16 version and the body in that version's layout."""
        if not 0 <= version <= self.latest:
            raise ProtocolError(f"unsupported {self.name} version {version}")
        out = Frame(INT16_S.pack(version))
        try:
            self._codecs[version].write(out, body)
        except _ENCODE_ERRORS as e:
            raise ProtocolError(f"cannot encode {self.name} v{version}: {e}") from None
        return bytes(out)

    def decode(self, data: Any) -> tuple[int, dict]:
        """(the version written, the body read in its layout or the latest one we know)."""
        mv = _as_view(data)
        try:
            version = INT16_S.unpack_from(mv, 0)[0]
            if version < 0:
                raise DecodeError(f"negative version {version}")
            body, _ = self._codecs[min(version, self.latest)].read(mv, 2)
        except _DECODE_ERRORS as e:
            raise ProtocolError(f"malformed {self.name}: {e}") from None
        return version, body


# ---------------------------------------------------------------- requests

def read_request_header(buf: Any, pos: int = 0) -> RequestHeader:
    """Read a request header (v1, or v2 with tagged fields when the api version is flexible).

    Works for unknown api keys and versions (read as non-flexible) so the broker can answer them.
    """
    mv = _as_view(buf)
    try:
        api_key, api_version, correlation_id = _HEADER_S.unpack_from(mv, pos)
        p = pos + 8
        n = INT16_S.unpack_from(mv, p)[0]
        p += 2
        if n < 0:
            if n != -1:
                raise DecodeError(f"invalid client id length {n}")
            client_id = None
        else:
            if p + n > len(mv):
                raise DecodeError("truncated client id")
            client_id = str(mv[p:p + n], "utf-8")
            p += n
        if _FLEXIBLE.get((api_key, api_version), False):
            p = _skip_tagged(mv, p)
    except _DECODE_ERRORS as e:
        raise ProtocolError(f"malformed request header: {e}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, p - pos)


def _skip_tagged(buf: Any, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise DecodeError("truncated tagged field")
    return pos


def decode_request(header: RequestHeader, buf: Any, pos: int) -> dict:
    """Decode the request body that starts at ``pos`` (just after the header)."""
    codec = _codec(_REQUESTS, header.api_key, header.api_version)
    try:
        body, _ = codec.read(_as_view(buf), pos)
    except _DECODE_ERRORS as e:
        raise ProtocolError(f"malformed request api={header.api_key} v{header.api_version}: {e}") from None
    return body


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: dict) -> bytes:
    """A whole request frame: int32 length, header v1 (v2 when flexible), body."""
    codec = _codec(_REQUESTS, api_key, api_version)
    out = Frame(b"\x00\x00\x00\x00")
    try:
        out += _HEADER_S.pack(api_key, api_version, correlation_id)
        if client_id is None:
            out += b"\xff\xff"
        else:
            cid = client_id.encode("utf-8")
            out += INT16_S.pack(len(cid))
            out += cid
        if _FLEXIBLE[(api_key, api_version)]:
            out += b"\x00"
        codec.write(out, body)
    except _ENCODE_ERRORS as e:
        raise ProtocolError(f"cannot encode request api={api_key} v{api_version}: {e}") from None
    if out.regions:
        raise ProtocolError("file regions are only supported in responses")
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


# ---------------------------------------------------------------- responses

def _response_header_flexible(api_key: int, api_version: int) -> bool:
    # ApiVersions responses keep header v0 even in flexible versions, so that a client can read
    # the answer to a version the broker does not support.
    return api_key != _API_VERSIONS and _FLEXIBLE.get((api_key, api_version), False)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: dict) -> list:
    """A whole response frame as a list of chunks.

    The first chunk starts with the int32 frame length. Chunks are bytes-like, except records
    given as file regions (objects with an int ``size``), which appear as themselves in place.
    """
    codec = _codec(_RESPONSES, api_key, api_version)
    out = Frame(b"\x00\x00\x00\x00")
    try:
        out += INT32_S.pack(correlation_id)
        if _response_header_flexible(api_key, api_version):
            out += b"\x00"
        codec.write(out, body)
    except _ENCODE_ERRORS as e:
        raise ProtocolError(f"cannot encode response api={api_key} v{api_version}: {e}") from None
    regions = out.regions
    if not regions:
        struct.pack_into(">i", out, 0, len(out) - 4)
        return [out]
    total = len(out) - 4 + sum(region.size for _, region in regions)
    struct.pack_into(">i", out, 0, total)
    chunks: list = []
    start = 0
    for position, region in regions:
        if position > start:
            chunks.append(out[start:position])
        chunks.append(region)
        start = position
    if start < len(out):
        chunks.append(out[start:])
    return chunks


def decode_response(api_key: int, api_version: int, buf: Any, pos: int = 0) -> tuple[int, dict]:
    """Decode a response frame (without its length prefix): (correlation id, body)."""
    codec = _codec(_RESPONSES, api_key, api_version)
    mv = _as_view(buf)
    try:
        correlation_id = INT32_S.unpack_from(mv, pos)[0]
        pos += 4
        if _response_header_flexible(api_key, api_version):
            pos = _skip_tagged(mv, pos)
        body, _ = codec.read(mv, pos)
    except _DECODE_ERRORS as e:
        raise ProtocolError(f"malformed response api={api_key} v{api_version}: {e}") from None
    return correlation_id, body
