"""Compiled Avro writers: the same bytes as fastavro's schemaless_writer for every event of the workload and for the
edges of each type, None for the schemas they leave to fastavro, and AvroEncoder falling back to fastavro for the
records they refuse."""

from __future__ import annotations

import datetime
import io
import random
import uuid
from typing import Any

import fastavro
import pytest

from producers.workload import Workload
from schemas.compiled_writer import WRITE_ERRORS, compile_writer
from schemas.events import AUDIT_NAME, EVENT_TOPICS, load_schema
from schemas.serde import AvroEncoder

PREFIX = b"\x00\x00\x00\x00\x07"


def fastavro_bytes(schema: dict[str, Any], record: Any, prefix: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    buffer.write(prefix)
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), record)
    return buffer.getvalue()


EDGE_SCHEMA = {
    "type": "record", "name": "Edges", "namespace": "test",
    "fields": [
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "b", "type": "boolean"},
        {"name": "raw", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "maybe", "type": ["null", "string"]},
        {"name": "later", "type": ["long", "null"]},
        {"name": "defaulted", "type": "string", "default": "dflt"},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "long"}]}},
        {"name": "again", "type": "Inner"},
        {"name": "nothing", "type": "null"},
    ],
}

LONGS = [0, 1, -1, 63, -64, 64, -65, 8191, 8192, -8193, 2 ** 20, -(2 ** 20), 2 ** 27 - 1, 2 ** 27, 2 ** 41 - 1,
         2 ** 41, -(2 ** 41) - 1, 1_795_000_000_000, 2 ** 55, 2 ** 62, 2 ** 63 - 1, -(2 ** 63)]
INTS = [0, 1, -1, 63, 64, -65, 2 ** 20, 2 ** 31 - 1, -(2 ** 31)]
STRINGS = ["", "a", "é", "x" * 63, "x" * 64, "x" * 8191, "日本" * 3000, "dc1-frontend-001"]


def edge_records() -> list[dict[str, Any]]:
    rng = random.Random(5)
    records = []
    for n in range(400):
        records.append({
            "i": rng.choice(INTS), "l": rng.choice(LONGS + [rng.randrange(-(2 ** 63), 2 ** 63)]),
            "f": rng.choice([0.0, -1.5, 3.25, float("inf"), 7]), "d": rng.choice([0.0, 1e300, -2.5, float("nan"), 3]),
            "b": rng.random() < 0.5, "raw": rng.randbytes(rng.choice([0, 1, 63, 64, 9000])),
            "s": rng.choice(STRINGS), "id": str(uuid.UUID(int=rng.getrandbits(128))), "t": rng.choice(LONGS),
            "maybe": rng.choice([None, "", "text", "x" * 100]), "later": rng.choice([None, 0, -3, 2 ** 40]),
            "inner": {"x": rng.choice(LONGS)}, "again": {"x": n}, "nothing": None,
            **({"defaulted": rng.choice(STRINGS)} if n % 3 else {}),
        })
    return records


def test_every_event_of_the_workload_is_written_as_fastavro_writes_it() -> None:
    workload = Workload("dc1", 10, seed=3)
    writers = {topic: compile_writer(load_schema(name), PREFIX) for topic, name in EVENT_TOPICS.items()}
    assert all(writers.values())
    schemas = {topic: load_schema(name) for topic, name in EVENT_TOPICS.items()}
    seen = set()
    for step in range(40):
        for event in workload.next_events(1_795_000_000_000 + step * 2_500, 500):
            seen.add(event.topic)
            assert writers[event.topic](event.value) == fastavro_bytes(schemas[event.topic], event.value, PREFIX)
    assert seen == set(EVENT_TOPICS)


def test_the_edges_of_every_type_are_written_as_fastavro_writes_them() -> None:
    write = compile_writer(EDGE_SCHEMA)
    assert write is not None
    for record in edge_records():
        assert write(record) == fastavro_bytes(EDGE_SCHEMA, record), record


def test_a_string_cache_that_fills_up_starts_over_and_stays_right() -> None:
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    write = compile_writer(schema)
    for n in range(10_000):
        assert write({"s": f"v{n % 6000}"}) == fastavro_bytes(schema, {"s": f"v{n % 6000}"})


@pytest.mark.parametrize("field", [
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    {"name": "a", "type": {"type": "array", "items": "long"}},
    {"name": "m", "type": {"type": "map", "values": "string"}},
    {"name": "x", "type": {"type": "fixed", "name": "F", "size": 4}},
    {"name": "u", "type": ["null", "string", "long"]},
    {"name": "r", "type": ["null", {"type": "record", "name": "R", "fields": [{"name": "y", "type": "long"}]}]},
    {"name": "n", "type": "Unknown"},
])
def test_schemas_beyond_the_compiler_are_left_to_fastavro(field: dict[str, Any]) -> None:
    assert compile_writer({"type": "record", "name": "T", "fields": [field]}) is None


def test_the_audit_count_schema_is_left_to_fastavro() -> None:
    assert compile_writer(load_schema(AUDIT_NAME)) is None


@pytest.mark.parametrize("field, value", [
    ("i", 2 ** 31), ("i", 1.5), ("l", 2 ** 63), ("l", -(2 ** 63) - 1), ("l", 3.0), ("l", "7"), ("l", None),
    ("d", "x"), ("d", True), ("f", None), ("b", 1), ("raw", "text"), ("raw", bytearray(b"x")), ("s", 5),
    ("s", None), ("s", b"bytes"), ("id", uuid.UUID(int=7)), ("t", datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)),
    ("maybe", 5), ("later", "x"), ("inner", None), ("nothing", 0),
])
def test_a_value_the_writer_does_not_take_raises_for_fastavro_to_decide(field: str, value: Any) -> None:
    record = edge_records()[0] | {field: value}
    with pytest.raises(WRITE_ERRORS):
        compile_writer(EDGE_SCHEMA)(record)


def test_a_missing_field_without_default_raises() -> None:
    record = edge_records()[0]
    del record["s"]
    with pytest.raises(WRITE_ERRORS):
        compile_writer(EDGE_SCHEMA)(record)


class _Registry:
    def register(self, subject: str, schema: dict[str, Any]) -> int:
        return 7


def test_the_encoder_hands_what_the_compiled_writer_refuses_to_fastavro() -> None:
    encoder = AvroEncoder(_Registry(), {"edges": EDGE_SCHEMA})  # type: ignore[arg-type]
    plain = edge_records()[:20]
    converted = dict(plain[1], id=uuid.UUID(int=9),
                     t=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc))
    messages = [plain[0], None, converted, *plain[2:]]
    encoded = encoder.encode_for("edges", messages)
    assert encoded[1] is None
    assert encoded[2] == fastavro_bytes(EDGE_SCHEMA, converted, PREFIX)
    assert [e for n, e in enumerate(encoded) if n not in (1, 2)] == [
        fastavro_bytes(EDGE_SCHEMA, r, PREFIX) for r in [plain[0], *plain[2:]]]
    assert encoder.encode_for("edges", plain) == [fastavro_bytes(EDGE_SCHEMA, r, PREFIX) for r in plain]


def test_the_encoder_raises_fastavros_error_for_a_record_neither_takes() -> None:
    encoder = AvroEncoder(_Registry(), {"edges": EDGE_SCHEMA})  # type: ignore[arg-type]
    with pytest.raises(Exception) as raised:
        encoder.encode_for("edges", [edge_records()[0] | {"l": "not a long"}])
    with pytest.raises(type(raised.value)):
        fastavro_bytes(EDGE_SCHEMA, edge_records()[0] | {"l": "not a long"})
