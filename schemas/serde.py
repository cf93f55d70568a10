"""Avro messages in the Confluent wire format: our Producer's encoder and the matching decoder.

A message is one magic byte 0, the writer schema's registry id as 4 big-endian bytes, then the record in
Avro binary encoding without any schema or framing (fastavro's schemaless form). Any Confluent-compatible
deserializer reads what `AvroEncoder` writes, and `AvroDecoder` reads what theirs write.

The subject of a topic's values is `<topic>-value` (TopicNameStrategy). The encoder finds each topic's
schema id once (registering the schema, or only looking it up) and then encodes without asking again;
the decoder fetches each writer schema once by id and resolves it into the reader schema given for the
topic, so events written with an older or newer compatible schema read as the schema the reader knows.
"""

from __future__ import annotations

import io
import struct
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import fastavro
import numpy as np
from fastavro import schemaless_reader, schemaless_writer

from pipeline.client.encoder import Encoder
from schemas.events import AUDIT_NAME, load_schema, subject_for
from schemas.registry_client import SchemaRegistryClient

__all__ = ["MAGIC_BYTE", "AvroDecoder", "AvroEncoder", "EventKey", "WireFormatError", "audit_count_encoder",
           "event_key", "schema_id_of"]

MAGIC_BYTE = 0
_PREFIX = struct.Struct(">bI")


class WireFormatError(ValueError):
    """Bytes that are not a message in the Confluent wire format."""


def schema_id_of(message: bytes) -> int:
    """The registry id of the schema `message` was written with."""
    if len(message) < _PREFIX.size:
        raise WireFormatError(f"a message of {len(message)} bytes is too short for the Confluent wire format")
    magic, schema_id = _PREFIX.unpack_from(message)
    if magic != MAGIC_BYTE:
        raise WireFormatError(f"unknown magic byte {magic} (the Confluent wire format starts with 0)")
    return schema_id


def _varint(data: bytes, position: int) -> tuple[int, int]:
    """An Avro long (zigzag varint) at ``position``: (value, position after it)."""
    shift = result = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise WireFormatError("an Avro long longer than 10 bytes")


class EventKey(NamedTuple):
    """The first fields of an event's EventHeader: what the audit needs to count and name it."""

    event_id: str
    event_time: int
    server: str
    datacenter: str


def _string(data: bytes, position: int) -> tuple[str, int]:
    byte = data[position]
    if byte < 0x80:  # a length below 64, one byte as Avro writes it
        length, position = (byte >> 1) ^ -(byte & 1), position + 1
    else:
        length, position = _varint(data, position)
    end = position + length
    if length < 0 or end > len(data):
        raise WireFormatError("an Avro string runs past the message")
    return data[position:end].decode(), end


#: The eventId's length (36) as Avro writes it, at the first byte after the Confluent prefix.
_ID_LENGTH_AT = _PREFIX.size
_ID_LENGTH = 72


def event_key(message: bytes) -> EventKey | None:
    """The ``header`` fields eventId, eventTime, server and datacenter of an event in the Confluent wire
    format, read from its first bytes without decoding the rest (every event's record starts with its
    EventHeader, fields in that order); None for a message that is not laid out so."""
    try:
        if message[0] != MAGIC_BYTE:
            return None
        if message[_ID_LENGTH_AT] == _ID_LENGTH:
            position = _ID_LENGTH_AT + 1
        else:
            length, position = _varint(message, _ID_LENGTH_AT)
            if length != 36:
                return None
        event_id = message[position:position + 36].decode("ascii")
        position += 36
        event_time, position = _varint(message, position)
        server, position = _string(message, position)
        datacenter, _ = _string(message, position)
    except (IndexError, UnicodeDecodeError, WireFormatError):
        return None
    return EventKey(event_id, event_time, server, datacenter)


#: The bytes of a message ``event_keys`` looks at in bulk: headers of usual sizes lie within them.
_HEAD_BYTES = 96
_LANE_SHIFTS = np.arange(9, dtype=np.uint64) * np.uint64(7)


def event_keys(messages: Sequence[bytes]) -> list[EventKey | None]:
    """``event_key`` of each of ``messages``: the usual layout (the id's length in one byte, eventTime in up to 9
    bytes, server and datacenter each shorter than 64 bytes, all within the first ``_HEAD_BYTES``) read for all of
    them at once, any other message by ``event_key``."""
    n = len(messages)
    if n < 8:
        return [event_key(m) for m in messages]
    heads = b"".join([m[:_HEAD_BYTES] for m in messages])
    if len(heads) != n * _HEAD_BYTES:
        heads = b"".join([m[:_HEAD_BYTES].ljust(_HEAD_BYTES, b"\x80") for m in messages])
    a = np.frombuffer(heads, dtype=np.uint8).reshape(n, _HEAD_BYTES)
    ok = (a[:, 0] == MAGIC_BYTE) & (a[:, _ID_LENGTH_AT] == _ID_LENGTH) & (a[:, 6:42] < 0x80).all(axis=1)
    # eventTime: a varint of up to 9 bytes from byte 42 (10 bytes, where Python ints and int64 part, by event_key)
    more = a[:, 42:51] >= 0x80
    ok &= ~more.all(axis=1)
    length = np.argmin(more, axis=1) + 1
    lanes = (a[:, 42:51] & 0x7F).astype(np.uint64) << _LANE_SHIFTS
    lanes[np.arange(9) >= length[:, None]] = 0
    zigzag = lanes.sum(axis=1)
    times = ((zigzag >> np.uint64(1)).astype(np.int64) ^ -(zigzag & np.uint64(1)).astype(np.int64)).tolist()
    rows = np.arange(n)
    server_at = 42 + length
    server_length = a[rows, server_at]
    ok &= (server_length < 0x80) & (server_length % 2 == 0) & (server_at + 1 + server_length // 2 < _HEAD_BYTES)
    datacenter_at = np.minimum(server_at + 1 + server_length // 2, _HEAD_BYTES - 1)
    datacenter_length = a[rows, datacenter_at]
    ok &= (datacenter_length < 0x80) & (datacenter_length % 2 == 0)
    end = datacenter_at + 1 + datacenter_length // 2
    ok &= (end <= _HEAD_BYTES) & (end <= np.fromiter(map(len, messages), dtype=np.int64, count=n))
    out: list[EventKey | None] = []
    for m, good, event_time, s, d, e in zip(messages, ok.tolist(), times, (server_at + 1).tolist(),
                                            datacenter_at.tolist(), end.tolist()):
        if not good:
            out.append(event_key(m))
            continue
        try:
            out.append(EventKey(m[6:42].decode("ascii"), event_time, m[s:d].decode(), m[d + 1:e].decode()))
        except UnicodeDecodeError:
            out.append(None)
    return out


class AvroEncoder(Encoder):
    """Encodes records (dicts) for our Producer, one writer schema per topic.

    `schemas` maps each topic to its writer schema (a dict); `default_schema`, if given, is used for
    topics not in the map. With `auto_register` (the default, as Confluent's serializer) a schema new to
    its subject is registered; without it, it must already be registered there.
    """

    def __init__(self, registry: SchemaRegistryClient, schemas: Mapping[str, Mapping[str, Any]] | None = None, *,
                 default_schema: Mapping[str, Any] | None = None, auto_register: bool = True,
                 subject_name: Callable[[str], str] = subject_for) -> None:
        self.registry = registry
        self.schemas = dict(schemas or {})
        self.default_schema = default_schema
        self.auto_register = auto_register
        self.subject_name = subject_name
        self._writers: dict[str, tuple[bytes, Any]] = {}

    def writer_for(self, topic: str) -> tuple[bytes, Any]:
        """(the 5-byte prefix with the schema id, the parsed schema) for `topic`'s values."""
        found = self._writers.get(topic)
        if found is None:
            schema = self.schemas.get(topic, self.default_schema)
            if schema is None:
                raise KeyError(f"AvroEncoder has no schema for topic {topic!r}")
            subject = self.subject_name(topic)
            schema = dict(schema)
            schema_id = (self.registry.register if self.auto_register else self.registry.lookup)(subject, schema)
            found = self._writers[topic] = (_PREFIX.pack(MAGIC_BYTE, schema_id), fastavro.parse_schema(schema))
        return found

    def schema_id(self, topic: str) -> int:
        """The registry id of the schema `topic`'s values are written with."""
        return schema_id_of(self.writer_for(topic)[0])

    def encode_for(self, topic: str, messages: Sequence[Any]) -> list:
        prefix, parsed = self.writer_for(topic)
        out = []
        buffer = io.BytesIO()
        write, getvalue, seek, truncate = buffer.write, buffer.getvalue, buffer.seek, buffer.truncate
        for record in messages:
            if record is None:
                out.append(None)
                continue
            write(prefix)
            schemaless_writer(buffer, parsed, record)
            out.append(getvalue())
            seek(0)
            truncate()
        return out

    def encode(self, message: Any) -> bytes | None:
        if len(self.schemas) != 1 or self.default_schema is not None:
            raise TypeError("AvroEncoder.encode needs the topic: use encode_for(topic, messages)")
        return self.encode_for(next(iter(self.schemas)), [message])[0]


def audit_count_encoder(registry: SchemaRegistryClient, topic: str) -> AvroEncoder:
    """The encoder of the AuditCount records a tier publishes to ``topic`` (pipeline.auditing.publisher)."""
    return AvroEncoder(registry, {topic: load_schema(AUDIT_NAME)})


class AvroDecoder:
    """Decodes Confluent wire-format messages into dicts.

    `reader_schemas` maps a topic to the schema its records are read as (resolving each writer's schema
    into it, with Avro's schema resolution rules); a topic without one, or a call without a topic, reads
    with the writer's own schema.
    """

    def __init__(self, registry: SchemaRegistryClient,
                 reader_schemas: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.registry = registry
        self._readers = {topic: fastavro.parse_schema(dict(schema)) for topic, schema in (reader_schemas or {}).items()}
        self._pairs: dict[tuple[int, str | None], tuple[Any, Any]] = {}

    def decode(self, message: bytes, topic: str | None = None) -> Any:
        """The record in `message` (None stays None)."""
        if message is None:
            return None
        schema_id = schema_id_of(message)
        pair = self._pairs.get((schema_id, topic))
        if pair is None:
            writer = self.registry.schema(schema_id).parsed
            pair = self._pairs[(schema_id, topic)] = (writer, self._readers.get(topic) if topic else None)
        writer, reader = pair
        stream = io.BytesIO(message)
        stream.seek(_PREFIX.size)
        record = schemaless_reader(stream, writer, reader)
        if stream.tell() != len(message):
            raise WireFormatError(f"{len(message) - stream.tell()} bytes left after the record "
                                  f"(schema id {schema_id})")
        return record
