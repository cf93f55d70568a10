"""Event ids for the audit sketches: read from an event's first bytes, and carried by a window's AuditCount."""

from __future__ import annotations

import io
import struct
import uuid

import fastavro

from pipeline.auditing.counting import AuditCounter
from pipeline.auditing.sketch import EventSketch
from schemas.events import parsed_schema
from schemas.serde import event_key


def encoded_event(event_id: str, event_time: int) -> bytes:
    """An event in the wire format as far as the audit reads it: every event's record starts with its
    EventHeader, so a page view's first bytes are those of its header written alone."""
    header = {"eventId": event_id, "eventTime": event_time, "server": "fe-1", "datacenter": "dc1",
              "service": "frontend", "sequence": 7}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed_schema("EventHeader"), header)
    return struct.pack(">bI", 0, 42) + out.getvalue() + b"the rest of the event"


def test_the_id_time_server_and_datacenter_of_an_event_are_read_from_its_header():
    event_id = str(uuid.uuid4())
    assert event_key(encoded_event(event_id, 1_795_000_123_456)) == (event_id, 1_795_000_123_456, "fe-1", "dc1")
    assert event_key(encoded_event(event_id, -5)).event_time == -5
    truncated = encoded_event(event_id, 7)[:46]
    for not_an_event in (b"", b"\x01\x00\x00\x00\x01", b"\x00\x00\x00\x00\x01\x02ab", b"plain text value", truncated):
        assert event_key(not_an_event) is None


def test_a_window_carries_the_sketch_of_its_acknowledged_ids():
    counter = AuditCounter(window_ms=1000, datacenter="dc1", application="frontend")
    acked, failed = [str(uuid.uuid4()) for _ in range(5)], [str(uuid.uuid4()) for _ in range(2)]
    counter.sent("fe-1", "T", 100, n=7)
    counter.settled([("fe-1", "T", 100, 10)] * 5, True, acked)
    counter.settled([("fe-1", "T", 100, 10)] * 2, False, failed)
    (record,) = counter.close_windows(None)
    assert record["count"] == 5 and record["properties"]["failed"] == "2"
    assert EventSketch.from_bytes(record["sketch"]).decode().counts == {i: 1 for i in acked}
    counter.sent("fe-1", "T", 100)
    counter.settled([("fe-1", "T", 100, 10)], True)
    assert counter.close_windows(None)[0]["sketch"] is None


def test_counts_taken_before_a_window_closes_add_up_with_what_comes_after():
    counter = AuditCounter(window_ms=1000, datacenter="dc1", application="mirror")
    first, later = [str(uuid.uuid4()) for _ in range(3)], [str(uuid.uuid4()) for _ in range(2)]
    counter.sent("m", "T", 100, n=6)
    counter.settled([("m", "T", 100, 10)] * 3, True, first)
    (taken,) = counter.take_counted()
    assert taken["count"] == 3 and "unsettled" not in taken["properties"]
    assert counter.take_counted() == []  # nothing new settled: nothing to publish
    counter.settled([("m", "T", 100, 10)] * 2, True, later)
    counter.settled([("m", "T", 100, 10)], False, [None])
    (rest,) = counter.close_windows(None)
    assert (rest["count"], rest["properties"]["failed"]) == (2, "1")
    whole = EventSketch.from_bytes(taken["sketch"]) + EventSketch.from_bytes(rest["sketch"])
    assert whole.decode().counts == {i: 1 for i in first + later}
    assert taken["properties"]["recordId"] != rest["properties"]["recordId"]
