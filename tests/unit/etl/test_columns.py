"""A fetch loaded column by column (etl.columns) gives exactly the batch, the audit counts and the bad records of
the row path (etl.task.RowBuilder), and hands back to it what it cannot be sure of."""

from __future__ import annotations

import io
import json
import random
import re
import struct
from types import SimpleNamespace
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from etl.columns import fetch_columns, header_columns_fit
from etl.load import table_schema
from etl.quarantine import BadRecord
from etl.task import LINEAGE_FIELDS, PARTITION_COLUMNS, Decoder, RowBuilder, convertible, table_arrow_schema
from pipeline.auditing.latency import LatencyBuckets
from pipeline.lineage import lineage_headers
from producers.workload import Workload
from schemas.events import EVENT_TOPICS, load_schema
from schemas.registry_client import RegisteredSchema, SchemaRegistryError

WINDOW_MS = 60_000
NOW_S = 1_700_000_500.0
#: The address of the stream in an error message (the two paths read from streams of their own).
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


class Registry:
    """Every event schema under an id of its own (the topic's index + 1), PageViewEvent v1 as 99; 404 otherwise."""

    def __init__(self) -> None:
        self.texts = {i + 1: json.dumps(load_schema(name)) for i, name in enumerate(EVENT_TOPICS.values())}
        self.texts[99] = json.dumps(load_schema("PageViewEvent", 1))

    def id_of(self, topic: str) -> int:
        return list(EVENT_TOPICS).index(topic) + 1

    def schema(self, schema_id: int) -> RegisteredSchema:
        if schema_id not in self.texts:
            raise SchemaRegistryError(404, 40403, f"Schema {schema_id} not found")
        return RegisteredSchema(schema_id, self.texts[schema_id])


def wire(schema_id: int, schema: dict[str, Any], event: dict[str, Any]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), event)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def _workload_events() -> dict[str, list[dict[str, Any]]]:
    """Events of every topic of the emulators' workload, over several hours."""
    workload = Workload("dc1", 20, seed=7)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for step in range(30):
        for event in workload.next_events(1_700_000_000_000 + step * 600_000, 500):
            by_topic.setdefault(event.topic, []).append(event.value)
    return by_topic


_EVENTS = _workload_events()


def headers_of(rng: random.Random, offset: int) -> tuple:
    kind = rng.randrange(7)
    if kind == 0:
        return ()
    if kind == 1:
        return (("trace", b"x"),)
    if kind == 2:  # a record mirrored twice: the last hop's headers win
        return tuple(lineage_headers(lineage_headers((("trace", None),), b"dc2", 1, 5), b"dc1", 3, offset))
    if kind == 3:  # the lineage headers first, a header of the record's own after them
        return (*lineage_headers((), b"dc1", 2, offset), ("trace", b"y"))
    if kind == 4:  # not a number
        return (("mirror.cluster", b"dc1"), ("mirror.partition", b"two"), ("mirror.offset", b"7"))
    if kind == 5:  # incomplete
        return (("mirror.cluster", b"dc1"), ("mirror.offset", b"7"))
    return tuple(lineage_headers((), b"dc2", rng.randrange(4), offset))


def records_of(topic: str, events: list[dict[str, Any]], registry: Registry, rng: random.Random,
               bad: bool) -> list[Any]:
    schema = load_schema(topic)
    out = []
    for offset, event in enumerate(events, start=100):
        value = wire(registry.id_of(topic), schema, event)
        if bad and offset % 37 == 0:
            value = rng.choice([None, b"stray", value[:-2], value + b"x", b"\x00\x00\x00\x00\x63" + value[5:]])
        out.append(SimpleNamespace(offset=offset, timestamp=1_700_000_000_000 + rng.randrange(-10**9, 10**9),
                                   key=b"k", value=value, headers=headers_of(rng, offset)))
    return out


def row_path(builder: RowBuilder, records: list[Any], start: int, end: int, arrow_schema: pa.Schema,
             target: pa.Schema) -> tuple[pa.RecordBatch, dict, list]:
    rows, marks, bad = [], [], []
    for record in records:
        if not start <= record.offset < end:
            continue
        try:
            built = builder.row(record)
        except BadRecord as error:
            bad.append((record.offset, error.reason, error.message))
            continue
        rows.append(built[0])
        marks.append(built[1])
    batch, refused = convertible(rows, arrow_schema, target)
    assert not refused
    windows: dict = {}
    for key, event_id, size, event_ms in marks:
        counts = windows.setdefault(key, [0, 0, [], LatencyBuckets()])
        counts[0] += 1
        counts[1] += size
        if event_id is not None:
            counts[2].append(event_id)
        counts[3].add(NOW_S - event_ms / 1000)
    return batch, windows, bad


def schemas_of(topic: str) -> tuple[pa.Schema, pa.Schema, pa.Schema]:
    reader = load_schema(topic)
    arrow_schema = table_arrow_schema(reader)
    target = to_arrow_schema(table_schema(reader), timezone="UTC")
    event = pa.schema(list(arrow_schema)[:-(len(LINEAGE_FIELDS) + len(PARTITION_COLUMNS))])
    return arrow_schema, target, event


def column_path(topic: str, records: list[Any], start: int, end: int, decoder: Decoder) -> Any:
    arrow_schema, target, event = schemas_of(topic)
    return fetch_columns(records, start, end, topic, 4, decoder.decode, event, arrow_schema, target, WINDOW_MS,
                         NOW_S, {})


def assert_same(topic: str, records: list[Any], start: int, end: int) -> None:
    registry = Registry()
    arrow_schema, target, event = schemas_of(topic)
    assert header_columns_fit(event)
    reader = json.dumps(load_schema(topic))
    expected, windows, bad = row_path(RowBuilder(topic, 4, Decoder(registry, reader), WINDOW_MS), records, start,
                                      end, arrow_schema, target)  # type: ignore[arg-type]
    loaded = column_path(topic, records, start, end, Decoder(registry, reader))  # type: ignore[arg-type]
    assert loaded is not None
    assert [(r.offset, e.reason, _ADDRESS.sub("", e.message)) for r, e in loaded.bad] == \
        [(offset, reason, _ADDRESS.sub("", message)) for offset, reason, message in bad]
    if expected.num_rows == 0:
        assert loaded.batch is None
    else:
        assert loaded.batch.schema == target
        assert loaded.batch.equals(expected)
    assert sorted(loaded.windows) == sorted(windows)
    for key, (rows, size, ids, latency) in windows.items():
        found = loaded.windows[key]
        assert (found.rows, found.bytes, found.ids, found.latency.counts) == (rows, size, ids, latency.counts)
        assert found.latency.total == pytest.approx(latency.total)


@pytest.mark.parametrize("topic", list(EVENT_TOPICS))
def test_every_topic_s_events_load_as_the_row_path_loads_them_lineage_and_bad_records_included(topic: str) -> None:
    rng = random.Random(topic)
    events = _EVENTS[topic][:400]
    assert len(events) >= 20
    for i, event in enumerate(events):
        if i % 11 == 0:
            event["header"]["datacenter"] = "dc2"
        if i % 13 == 0:
            event["header"]["eventId"] = "not-a-uuid"
        if i % 17 == 0:
            event["header"]["eventTime"] = -86_400_000 * 3 - 1  # before the epoch
    records = records_of(topic, events, Registry(), rng, bad=True)
    assert_same(topic, records, 100, 100 + len(records))
    assert_same(topic, records, 150, 420)


def test_a_range_without_rows_and_a_writer_the_reader_resolves() -> None:
    topic = "PageViewEvent"
    registry = Registry()
    event = Workload("dc1", 1, seed=1).next_events(1_700_000_000_000, 50)
    value = next(e.value for e in event if e.topic == topic)
    old = {k: v for k, v in value.items() if k != "sessionId"}
    resolved = SimpleNamespace(offset=1, timestamp=5, key=None, value=wire(99, load_schema(topic, 1), old),
                               headers=())
    assert_same(topic, [resolved], 0, 10)
    assert_same(topic, [SimpleNamespace(offset=1, timestamp=5, key=None, value=None, headers=())], 0, 10)
    assert_same(topic, [resolved], 5, 10)
    decoder = Decoder(registry, json.dumps(load_schema(topic)))  # type: ignore[arg-type]
    decoder.decode(resolved.value)
    assert decoder.writers[99][1] is decoder.reader, "a writer other than the reader is resolved into it"
    decoder.decode(wire(1, load_schema(topic), value))
    assert decoder.writers[1][1] is None, "the reader's own schema is read without resolution"


def test_what_the_columns_cannot_be_sure_of_goes_back_to_the_row_path() -> None:
    topic = "PageViewEvent"
    registry = Registry()
    value = next(e.value for e in Workload("dc1", 1, seed=1).next_events(1_700_000_000_000, 50) if e.topic == topic)
    far = {**value, "header": {**value["header"], "eventTime": 2 ** 62}}
    record = SimpleNamespace(offset=1, timestamp=5, key=None, value=wire(1, load_schema(topic), far), headers=())
    decoder = Decoder(registry, json.dumps(load_schema(topic)))  # type: ignore[arg-type]
    assert column_path(topic, [record], 0, 10, decoder) is None, "an event time outside the calendar"
    assert not header_columns_fit(pa.schema([("header", pa.string())]))
    assert not header_columns_fit(pa.schema([("header", pa.struct([("eventTime", pa.string())]))]))
    assert not header_columns_fit(pa.schema([("header", pa.struct([("eventId", pa.int64())]))]))
    assert header_columns_fit(pa.schema([("x", pa.int64())]))
    assert header_columns_fit(pa.schema([("header", pa.struct([("eventTime", pa.int64())]))]))


def test_events_without_a_header_count_under_their_kafka_timestamp() -> None:
    schema = {"type": "record", "name": "Bare", "fields": [{"name": "n", "type": "long"}]}

    class Bare:
        def schema(self, schema_id: int) -> RegisteredSchema:
            return RegisteredSchema(schema_id, json.dumps(schema))

    records = [SimpleNamespace(offset=i, timestamp=1_700_000_000_000 + i * 40_000, key=None,
                               value=wire(1, schema, {"n": i}), headers=()) for i in range(20)]
    arrow_schema = table_arrow_schema(schema)
    target = to_arrow_schema(table_schema(schema), timezone="UTC")
    event = pa.schema(list(arrow_schema)[:1])
    reader = json.dumps(schema)
    expected, windows, _ = row_path(RowBuilder("bare", 4, Decoder(Bare(), reader), WINDOW_MS), records, 0, 20,
                                    arrow_schema, target)  # type: ignore[arg-type]
    loaded = fetch_columns(records, 0, 20, "bare", 4, Decoder(Bare(), reader).decode,  # type: ignore[arg-type]
                           event, arrow_schema, target, WINDOW_MS, NOW_S, {})
    assert loaded is not None and loaded.batch.equals(expected)
    assert {k: (w.rows, w.bytes, w.ids) for k, w in loaded.windows.items()} == \
        {k: (c, b, ids) for k, (c, b, ids, _) in windows.items()}
