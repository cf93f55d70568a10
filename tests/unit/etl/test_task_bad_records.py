"""What a task makes of a record it cannot load: the reason it is quarantined under, the row kept for it, the
files its range writes, and the quarantine AuditCount records of a commit."""

from __future__ import annotations

import base64
import io
import json
import os
import stat
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from etl.audit_counts import AuditCounts
from pipeline.auditing.latency import LatencyBuckets
from pipeline.auditing.sketch import EventSketch
from etl.quarantine import (
    NOT_WIRE_FORMAT,
    NULL_VALUE,
    QUARANTINE_SCHEMA,
    UNCONVERTIBLE,
    UNDECODABLE,
    UNKNOWN_SCHEMA_ID,
    BadRecord,
    QuarantineWriter,
    quarantine_table,
    quarantined_row,
)
from etl.task import Decoder, RowBuilder, _sketch_text, convertible
from pipeline.lineage import Lineage
from schemas.events import load_schema
from schemas.registry_client import RegisteredSchema, SchemaRegistryError

V1 = load_schema("PageViewEvent", 1)
EVENT = {"header": {"eventId": "0" * 8 + "-0000-4000-8000-" + "0" * 12, "eventTime": 1_700_000_000_000,
                    "server": "fe1", "datacenter": "dc1", "service": "frontend", "sequence": 1},
         "memberId": 7, "pageKey": "home", "url": "/", "referrer": None, "userAgent": "ua"}


class FakeRegistry:
    """Schema 1 is PageViewEvent v1; 2 is a schema no record resolves to; other ids are unknown (404); with
    ``down`` every look-up fails as an unreachable registry does."""

    def __init__(self) -> None:
        self.down = False
        self.lookups = 0

    def schema(self, schema_id: int) -> RegisteredSchema:
        self.lookups += 1
        if self.down:
            raise SchemaRegistryError(0, 0, "http://registry: connection refused")
        if schema_id == 1:
            return RegisteredSchema(1, json.dumps(V1))
        if schema_id == 2:
            return RegisteredSchema(2, json.dumps({"type": "record", "name": "Other", "fields": [
                {"name": "x", "type": "string"}]}))
        raise SchemaRegistryError(404, 40403, f"Schema {schema_id} not found")


def wire(schema_id: int, event: dict[str, Any] = EVENT, schema: dict[str, Any] = V1) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), event)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def record(value: bytes | None, offset: int = 5, headers: tuple = ()) -> Any:
    return SimpleNamespace(offset=offset, timestamp=1_700_000_123_456, key=b"k", value=value, headers=headers)


def reason_of(decoder: Decoder, value: bytes | None) -> str:
    with pytest.raises(BadRecord) as bad:
        decoder.decode(value)
    return bad.value.reason


def test_each_kind_of_bad_value_has_its_reason_and_a_registry_that_cannot_be_reached_is_no_reason() -> None:
    registry = FakeRegistry()
    decoder = Decoder(registry, json.dumps(V1))  # type: ignore[arg-type]
    assert decoder.decode(wire(1))["memberId"] == 7
    assert reason_of(decoder, None) == NULL_VALUE
    assert reason_of(decoder, b"a stray line") == NOT_WIRE_FORMAT
    assert reason_of(decoder, b"\x00\x00") == NOT_WIRE_FORMAT
    assert reason_of(decoder, wire(1)[:-3]) == UNDECODABLE
    assert reason_of(decoder, wire(1) + b"extra") == UNDECODABLE
    assert reason_of(decoder, wire(2, {"x": "y"}, {"type": "record", "name": "Other",
                                                  "fields": [{"name": "x", "type": "string"}]})) == UNDECODABLE
    lookups = registry.lookups
    assert reason_of(decoder, wire(9)) == UNKNOWN_SCHEMA_ID
    assert reason_of(decoder, wire(9)) == UNKNOWN_SCHEMA_ID
    assert registry.lookups == lookups + 1, "an unknown id is asked once per task"
    registry.down = True
    with pytest.raises(SchemaRegistryError, match="connection refused"):
        decoder.decode(wire(10))


def test_an_event_time_outside_the_calendar_cannot_be_a_row() -> None:
    builder = RowBuilder("t", 0, Decoder(FakeRegistry(), json.dumps(V1)), 60_000)  # type: ignore[arg-type]
    row, mark = builder.row(record(wire(1)))
    assert (row["date"], row["hour"], row["kafka_offset"]) == ("2023-11-14", 22, 5)
    assert mark == (("dc1", 1_699_999_980_000), EVENT["header"]["eventId"], len(wire(1)), 1_700_000_000_000)
    # A row whose "id" is no UUID loads and is counted, but the audit's sketch cannot hold it: left out of it.
    odd = {**EVENT, "header": {**EVENT["header"], "eventId": "x" * 36}}
    assert builder.row(record(wire(1, odd)))[0]["memberId"] == 7
    sketch = EventSketch.from_bytes(base64.b64decode(_sketch_text([EVENT["header"]["eventId"], "x" * 36])))
    assert sketch.decode().counts == {EVENT["header"]["eventId"]: 1}
    far = {**EVENT, "header": {**EVENT["header"], "eventTime": 2 ** 62}}
    with pytest.raises(BadRecord) as bad:
        builder.row(record(wire(1, far)))
    assert bad.value.reason == UNCONVERTIBLE and "outside the calendar" in bad.value.message


def test_rows_arrow_refuses_are_left_out_of_the_batch_and_named() -> None:
    schema = pa.schema([("n", pa.int32())])
    batch, refused = convertible([{"n": 1}, {"n": 2 ** 40}, {"n": 3}], schema, schema)
    assert batch.column("n").to_pylist() == [1, 3]
    assert [(index, bad.reason) for index, bad in refused] == [(1, UNCONVERTIBLE)]


def test_a_quarantined_record_keeps_its_lineage_bytes_headers_and_the_event_id_its_header_still_gives() -> None:
    headers = (("mirror.cluster", b"dc2"), ("mirror.partition", b"3"), ("mirror.offset", b"77"), ("x", None))
    cut = quarantined_row("run-1", "t", 4, record(wire(1)[:-3], headers=headers),
                          BadRecord(UNDECODABLE, "cannot decode the value: EOFError", 1), Lineage("dc2", "t", 3, 77))
    assert cut.event_id == EVENT["header"]["eventId"] and cut.time_ms == 1_700_000_000_000
    assert (cut.date, cut.hour, cut.datacenter) == ("2023-11-14", 22, "dc1")
    assert cut.row["source_cluster"] == "dc2" and cut.row["source_offset"] == 77 and cut.row["schema_id"] == 1
    assert cut.row["headers"][-1] == {"key": "x", "value": None}
    stray = quarantined_row("run-1", "t", 4, record(b"a stray line"), BadRecord(NOT_WIRE_FORMAT, "no"),
                            Lineage("dc2", "t", 3, 77))
    # No id: counted in the window of its Kafka timestamp, under the datacenter its lineage names.
    assert (stray.event_id, stray.time_ms, stray.datacenter) == (None, 1_700_000_123_456, "dc2")
    assert quarantined_row("r", "t", 0, record(None), BadRecord(NULL_VALUE, "none"), None).size == 0
    # An "id" the audit could not count (not a UUID) is not kept as one.
    odd = {**EVENT, "header": {**EVENT["header"], "eventId": "x" * 36}}
    assert quarantined_row("r", "t", 0, record(wire(1, odd)[:-3]), BadRecord(UNDECODABLE, "x"), None).event_id is None


def test_a_range_s_quarantine_files_appear_whole_on_close_owner_only_and_vanish_on_abort(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        rows = [quarantined_row("r", "t", 0, record(wire(1)[:-3], offset=o), BadRecord(UNDECODABLE, "x", 1), None)
                for o in range(3)]
        writer = QuarantineWriter(tmp_path / "staged" / "t", 7)
        writer.write(rows[:2])
        writer.write(rows[2:])
        directory = tmp_path / "staged" / "t" / "date=2023-11-14" / "hour=22"
        assert list(directory.glob("part-*.parquet")) == [], "nothing under its name before close"
        writer.close()
        (written,) = directory.glob("*")
        assert written.name == "part-00007.parquet" and stat.S_IMODE(written.stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert [r["kafka_offset"] for r in quarantine_table([written]).to_pylist()] == [0, 1, 2]
        assert pq.read_schema(written).equals(QUARANTINE_SCHEMA)
        aborted = QuarantineWriter(tmp_path / "aborted", 1)
        aborted.write(rows)
        aborted.abort()
        assert [p for p in (tmp_path / "aborted").rglob("*") if p.is_file()] == []
    finally:
        os.umask(previous)


def test_a_commit_s_audit_records_count_rows_and_quarantined_records_per_reason_datacenter_and_window() -> None:
    sketch = EventSketch()
    sketch.add([EVENT["header"]["eventId"]])
    sketch_text = base64.b64encode(sketch.to_bytes()).decode()
    counts = AuditCounts(60_000)
    stats = {"windows": [["dc1", 60_000, 4, 400, None, LatencyBuckets().to_text()]],
             "quarantined": [["unknown schema id", "dc1", 60_000, 1, 90, sketch_text, 0],
                             ["null value", "dc2", 120_000, 0, 0, None, 2]]}
    counts.add_task_stats("t", stats)
    counts.add_task_stats("t", {"windows": [], "quarantined": [["null value", "dc2", 120_000, 0, 0, None, 1]]})
    records = counts.records("run-9")
    assert [(r["count"], r["properties"].get("quarantined"), r["properties"].get("withoutId")) for r in records] == \
        [(4, None, None), (0, "null value", "3"), (1, "unknown schema id", "0")]
    assert all(r["tier"] == "warehouse" and r["properties"]["run"] == "run-9" and "latency" in r["properties"]
               for r in records)
    assert len({r["properties"]["recordId"] for r in records}) == 3
    assert records[2]["sketch"] == sketch_text and records[1]["datacenter"] == "dc2"
    assert counts.quarantined_by_topic() == {"t": {"unknown schema id": 1, "null value": 3}}
