"""What an AuditCount record counts, as docs/accounting.md says each tier publishes it (the producer tier's
created and failed events with their sketch, quarantine records, today's records without `created`), and the
records that can never be counted, each with its reason."""

from __future__ import annotations

import base64
import datetime
import uuid

import pytest

from audit.measures import failed_measure, parse_measure, quarantine_measure
from audit.records import UnreadableRecord, read_audit_count
from pipeline.auditing.sketch import EventSketch

WINDOW = 60_000


def sketch_of(ids: list[str]) -> EventSketch:
    sketch = EventSketch()
    sketch.add(ids)
    return sketch


def record(tier: str = "producer", count: int = 3, properties: dict | None = None, **fields) -> dict:
    start = datetime.datetime.fromtimestamp(120, datetime.timezone.utc)  # as fastavro gives a timestamp-millis
    return {"topic": "PageViewEvent", "tier": tier, "windowStart": start,
            "windowEnd": start + datetime.timedelta(milliseconds=WINDOW), "host": "fe-1", "datacenter": "dc1",
            "application": "frontend", "count": count, "bytes": 100 * count, "sketch": None,
            "properties": {"recordId": "r1", **(properties or {})}, **fields}


def test_a_producer_record_counts_the_acknowledged_events_and_the_failed_ones_apart_with_their_ids():
    acknowledged, failed = [str(uuid.uuid4()) for _ in range(3)], [str(uuid.uuid4()) for _ in range(2)]
    read = read_audit_count(record(sketch=sketch_of(acknowledged).to_bytes(), properties={
        "created": "5", "failed": "2", "failedBytes": "222",
        "failedSketch": base64.b64encode(sketch_of(failed).to_bytes()).decode()}), WINDOW)
    assert (read.record_id, read.tier, read.topic, read.datacenter, read.window_start) == (
        "r1", "producer", "PageViewEvent", "dc1", 120_000)
    (tier, own), (failed_name, failures) = read.measures
    assert tier == "producer" and (own.count, own.bytes) == (3, 300)
    assert own.sketch.decode().counts == dict.fromkeys(acknowledged, 1)
    assert failed_name == failed_measure("producer") and (failures.count, failures.bytes) == (2, 222)
    assert failures.sketch.decode().counts == dict.fromkeys(failed, 1)


def test_today_s_producer_records_count_created_as_acknowledged_plus_failed():
    (own, (_, failures)) = read_audit_count(record(properties={"failed": "4", "failedBytes": "40"}), WINDOW).measures
    assert own[1].count == 3 and (failures.count, failures.bytes, failures.sketch) == (4, 40, None)
    assert len(read_audit_count(record(properties={"failed": "0"}), WINDOW).measures) == 1


def test_a_quarantine_record_counts_per_tier_and_reason_with_and_without_ids():
    ids = [str(uuid.uuid4())]
    read = read_audit_count(record("warehouse", 1, {"quarantined": "null value", "withoutId": "5"},
                                   sketch=sketch_of(ids).to_bytes()), WINDOW)
    (with_ids, counted), (without, uncounted) = read.measures
    assert with_ids == quarantine_measure("warehouse", "null value") and counted.count == 1
    assert parse_measure(without) == ("warehouse", "quarantined-without-id", "null value") and uncounted.count == 5
    # A producer never counts failures in a quarantine record.
    assert [m for m, _ in read_audit_count(record(properties={"quarantined": "x", "failed": "2"}), WINDOW)
            .measures] == [quarantine_measure("producer", "x")]


@pytest.mark.parametrize("broken, reason", [
    ({"tier": None}, "missing field"),
    ({"count": "3"}, "missing field"),
    ({"windowStart": "noon"}, "missing field"),
    ({"sketch": b"\x07garbage"}, "invalid sketch"),
    ({"properties": {"failedSketch": "***"}}, "invalid sketch"),
    ({"properties": {"created": "many"}}, "invalid property"),
    ({"properties": {"latency": "1,2;x"}}, "invalid property"),
    ({"windowEnd": 120_000 + 1000}, "another window size"),
])
def test_a_record_that_can_never_be_counted_says_why(broken, reason):
    data = record()
    for name, value in broken.items():
        if name == "properties":
            data["properties"].update(value)
        elif value is None:
            del data[name]
        else:
            data[name] = value
    with pytest.raises(UnreadableRecord) as raised:
        read_audit_count(data, WINDOW)
    assert raised.value.reason == reason
