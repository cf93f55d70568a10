"""The Avro event schemas: they parse everywhere, share one EventHeader, round-trip, and evolve compatibly."""

from __future__ import annotations

import io
import json
import uuid
from datetime import datetime, timezone
from importlib import resources
from typing import Any

import avro.schema
import fastavro
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from schemas.events import (
    AUDIT_NAME,
    AUDIT_TOPIC,
    EVENT_NAMES,
    EVENT_TOPICS,
    HEADER_NAME,
    NAMESPACE,
    load_schema,
    parsed_schema,
    references,
    source_schema,
    subject_for,
    versions,
)

ALL_NAMES = (HEADER_NAME, *EVENT_NAMES, AUDIT_NAME)
ALL_VERSIONS = [(name, version) for name in ALL_NAMES for version in versions(name)]
EVENT_TIME = datetime(2026, 11, 22, 21, 30, 15, 123000, tzinfo=timezone.utc)


def _header(sequence: int) -> dict[str, Any]:
    return {
        "eventId": uuid.UUID("0f8e2a4c-61b5-4c7e-9a3d-2b1c5e6f7a80"),
        "eventTime": EVENT_TIME,
        "server": "fe-dc1-017.example.com",
        "datacenter": "dc1",
        "service": "frontend",
        "sequence": sequence,
    }


SAMPLES: dict[str, dict[str, Any]] = {
    "PageViewEvent": {
        "header": _header(1), "memberId": 42, "pageKey": "profile", "url": "/in/member-42?trk=nav",
        "referrer": "https://www.example.com/feed", "userAgent": "Mozilla/5.0 (X11; Linux x86_64)",
    },
    "ClickEvent": {
        "header": _header(2), "memberId": 42, "pageKey": "feed", "elementId": "nav-jobs", "targetUrl": None,
    },
    "SearchEvent": {
        "header": _header(3), "memberId": -1, "query": "kafka engineer", "vertical": "jobs", "resultCount": 1234,
    },
    "ProfileViewEvent": {
        "header": _header(4), "viewerMemberId": 42, "viewedMemberId": 7, "source": "search",
    },
    "AdImpressionEvent": {
        "header": _header(5), "memberId": 42, "adId": 900001, "campaignId": 77, "pageKey": "feed", "position": 2,
    },
    "ServiceCallEvent": {
        "header": _header(6), "caller": "frontend", "callee": "profile-service", "endpoint": "GET /profiles/{id}",
        "latencyMs": 12.75, "statusCode": 200,
    },
    "SystemMetricsEvent": {
        "header": _header(7), "cpuPercent": 37.5, "memoryUsedBytes": 12 << 30, "memoryTotalBytes": 64 << 30,
        "diskUsedBytes": 400 << 30, "diskTotalBytes": 1 << 40, "networkInBytesPerSec": 1.5e6,
        "networkOutBytesPerSec": 8.25e6,
    },
    AUDIT_NAME: {
        "topic": "PageViewEvent", "tier": "producer",
        "windowStart": datetime(2026, 11, 22, 21, 30, tzinfo=timezone.utc),
        "windowEnd": datetime(2026, 11, 22, 21, 31, tzinfo=timezone.utc),
        "host": "fe-dc1-017.example.com", "datacenter": "dc1", "application": "frontend",
        "count": 5321, "bytes": 987654, "sketch": b"\x01\x02", "properties": {"emulator": "1"},
    },
}


def _encode(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _decode(data: bytes, writer: dict[str, Any], reader: dict[str, Any] | None = None) -> dict[str, Any]:
    parsed_reader = fastavro.parse_schema(reader) if reader is not None else None
    return fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(writer), parsed_reader)


def _compatibility(reader: dict[str, Any], writer: dict[str, Any]) -> SchemaCompatibilityType:
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer))
    )
    return result.compatibility


def test_package_data_holds_one_file_per_named_type_and_version() -> None:
    directory = resources.files("schemas") / "avro"
    files = sorted(entry.name for entry in directory.iterdir() if entry.name.endswith(".avsc"))
    expected = sorted(
        f"{name}.avsc" if version == 1 else f"{name}.v{version}.avsc" for name, version in ALL_VERSIONS
    )
    assert files == expected
    assert "PageViewEvent.v2.avsc" in files
    for name, version in ALL_VERSIONS:
        source = source_schema(name, version)
        assert (source["type"], source["namespace"], source["name"]) == ("record", NAMESPACE, name)


def test_sources_refer_to_the_header_by_name_and_never_copy_it() -> None:
    for name, version in ALL_VERSIONS:
        if name == HEADER_NAME:
            continue
        text = json.dumps(source_schema(name, version))
        assert f'"name": "{HEADER_NAME}"' not in text, name
        if name in EVENT_NAMES:
            assert source_schema(name, version)["fields"][0] == {"name": "header", "type": HEADER_NAME}
            assert references(name, version) == [f"{NAMESPACE}.{HEADER_NAME}"]
    assert references(AUDIT_NAME) == []


@pytest.mark.parametrize(("name", "version"), ALL_VERSIONS)
def test_every_resolved_schema_parses_with_fastavro_and_avro(name: str, version: int) -> None:
    schema = load_schema(name, version)
    fastavro.parse_schema(schema)
    parsed = avro.schema.parse(json.dumps(schema))
    assert parsed.fullname == f"{NAMESPACE}.{name}"


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_every_event_starts_with_the_one_header_record(name: str) -> None:
    for version in versions(name):
        schema = load_schema(name, version)
        first = schema["fields"][0]
        assert first["name"] == "header"
        assert first["type"] == load_schema(HEADER_NAME)
        assert json.dumps(schema).count(f'"name": "{HEADER_NAME}"') == 1
        parsed = avro.schema.parse(json.dumps(schema))
        assert parsed.fields[0].name == "header"
        assert parsed.fields[0].type.fullname == f"{NAMESPACE}.{HEADER_NAME}"


def test_header_fields_and_logical_types() -> None:
    fields = {field["name"]: field["type"] for field in load_schema(HEADER_NAME)["fields"]}
    assert list(fields) == ["eventId", "eventTime", "server", "datacenter", "service", "sequence"]
    assert fields["eventId"] == {"type": "string", "logicalType": "uuid"}
    assert fields["eventTime"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert fields["sequence"] == "long"
    audit = {field["name"]: field for field in load_schema(AUDIT_NAME)["fields"]}
    for window_field in ("windowStart", "windowEnd"):
        assert audit[window_field]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert audit["sketch"]["type"] == ["null", "bytes"] and audit["sketch"]["default"] is None
    assert audit["properties"]["type"] == {"type": "map", "values": "string"} and audit["properties"]["default"] == {}


@pytest.mark.parametrize("name", [*EVENT_NAMES, AUDIT_NAME])
def test_a_record_of_each_schema_round_trips_through_fastavro(name: str) -> None:
    for version in versions(name):
        record = {**SAMPLES[name], "sessionId": "s-123"} if (name, version) == ("PageViewEvent", 2) else SAMPLES[name]
        schema = load_schema(name, version)
        assert _decode(_encode(schema, record), schema) == record
    data = _encode(load_schema(name), record)
    decoded = fastavro.schemaless_reader(io.BytesIO(data), parsed_schema(name))
    assert decoded == record
    if name in EVENT_NAMES:
        assert isinstance(decoded["header"]["eventId"], uuid.UUID)
        assert decoded["header"]["eventTime"] == EVENT_TIME


def test_the_event_id_is_written_as_canonical_uuid_text() -> None:
    header = _header(0)
    data = _encode(load_schema(HEADER_NAME), header)
    plain = [{**field, "type": "string"} if field["name"] == "eventId" else field
             for field in load_schema(HEADER_NAME)["fields"]]
    decoded = _decode(data, {**load_schema(HEADER_NAME), "fields": plain})
    assert decoded["eventId"] == str(header["eventId"])


def test_topics_and_subjects_follow_the_record_names() -> None:
    assert set(EVENT_TOPICS) == set(EVENT_NAMES) == set(EVENT_TOPICS.values())
    for topic, name in EVENT_TOPICS.items():
        assert topic == name == load_schema(name)["name"]
    assert AUDIT_TOPIC == load_schema(AUDIT_NAME)["name"]
    assert subject_for("PageViewEvent") == "PageViewEvent-value"
    assert subject_for(AUDIT_TOPIC) == "AuditCount-value"


def test_loader_versions_names_and_copies() -> None:
    assert versions("PageViewEvent") == [1, 2]
    assert load_schema("PageViewEvent") == load_schema("PageViewEvent", 2)
    assert load_schema(f"{NAMESPACE}.ClickEvent") == load_schema("ClickEvent")
    load_schema("ClickEvent")["fields"].clear()
    assert load_schema("ClickEvent")["fields"]
    with pytest.raises(KeyError):
        load_schema("NoSuchEvent")
    with pytest.raises(KeyError):
        load_schema("ClickEvent", 2)


def test_page_view_v2_only_adds_an_optional_field_with_a_default() -> None:
    v1, v2 = load_schema("PageViewEvent", 1), load_schema("PageViewEvent", 2)
    assert v2["fields"][: len(v1["fields"])] == v1["fields"]
    (added,) = v2["fields"][len(v1["fields"]) :]
    assert added["name"] == "sessionId" and added["type"] == ["null", "string"] and added["default"] is None


def test_page_view_v1_events_read_with_the_v2_schema_get_the_default() -> None:
    v1, v2 = load_schema("PageViewEvent", 1), load_schema("PageViewEvent", 2)
    old = SAMPLES["PageViewEvent"]
    assert _decode(_encode(v1, old), v1, v2) == {**old, "sessionId": None}
    new = {**old, "sessionId": "s-123"}
    assert _decode(_encode(v2, new), v2, v1) == old


def test_page_view_v2_is_backward_and_forward_compatible_with_v1() -> None:
    v1, v2 = load_schema("PageViewEvent", 1), load_schema("PageViewEvent", 2)
    assert _compatibility(reader=v2, writer=v1) is SchemaCompatibilityType.compatible
    assert _compatibility(reader=v1, writer=v2) is SchemaCompatibilityType.compatible


def test_a_new_field_without_a_default_is_reported_incompatible() -> None:
    v1 = load_schema("PageViewEvent", 1)
    broken = {**v1, "fields": [*v1["fields"], {"name": "sessionId", "type": "string"}]}
    assert _compatibility(reader=broken, writer=v1) is SchemaCompatibilityType.incompatible
    with pytest.raises(fastavro.read.SchemaResolutionError):
        _decode(_encode(v1, SAMPLES["PageViewEvent"]), v1, broken)


def test_audit_count_fields_for_later_audits_default_when_absent() -> None:
    audit = load_schema(AUDIT_NAME)
    without_room = {**audit, "fields": [f for f in audit["fields"] if f["name"] not in ("sketch", "properties")]}
    record = {key: value for key, value in SAMPLES[AUDIT_NAME].items() if key not in ("sketch", "properties")}
    decoded = _decode(_encode(without_room, record), without_room, audit)
    assert decoded == {**record, "sketch": None, "properties": {}}
    assert _compatibility(reader=audit, writer=without_room) is SchemaCompatibilityType.compatible

