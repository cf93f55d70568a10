"""The mirror's quarantine file and its audit count, as pure logic (the mirror quarantining for real:
tests/integration/mirror/test_record_sizes.py)."""

from __future__ import annotations

import os
import stat
import uuid

from mirror.audit import MirrorAudit
from mirror.metrics import MirrorMetrics
from mirror.quarantine import MirrorQuarantine, read_quarantine, reason_of
from pipeline.auditing.sketch import EventSketch
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError


def test_a_quarantined_record_is_kept_whole_and_owner_only(tmp_path) -> None:
    quarantine = MirrorQuarantine(tmp_path / "state" / "mirror" / "quarantine")
    error = KafkaProtocolError(ErrorCode.MESSAGE_TOO_LARGE, "producing to T-3")
    reason = quarantine.add(source="dc1", topic="T", partition=3, offset=42, timestamp=1_700, key=b"k",
                            value=b"\x00\x01 value", headers=[("h", b"v"), ("empty", None)], error=error,
                            event_id="e")
    assert reason == "too large for the target" == reason_of(error)
    quarantine.add(source="dc1", topic="T", partition=3, offset=43, timestamp=1_701, key=None, value=None,
                   headers=[], error=KafkaProtocolError(ErrorCode.INVALID_RECORD, "x"), event_id=None)
    first, second = read_quarantine(quarantine.path("dc1"))
    assert (first["source"], first["topic"], first["partition"], first["offset"], first["timestamp"]) == (
        "dc1", "T", 3, 42, 1_700)
    assert (first["key"], first["value"], first["headers"]) == (b"k", b"\x00\x01 value", [("h", b"v"), ("empty", None)])
    assert "MESSAGE_TOO_LARGE" in first["error"] and first["eventId"] == "e"
    assert (second["key"], second["value"], second["reason"]) == (None, None, "invalid for the target")
    assert stat.S_IMODE(os.stat(quarantine.path("dc1")).st_mode) == 0o600
    for directory in (tmp_path / "state", tmp_path / "state" / "mirror", quarantine.directory):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700


def test_a_quarantined_record_leaves_the_mirror_count_for_a_quarantine_record() -> None:
    audit = MirrorAudit(["dc1"], window_ms=1_000, producer_config={"metadata.broker.list": "127.0.0.1:9"},
                        registry_url="http://127.0.0.1:9", topic="AuditCount", metrics=MirrorMetrics())
    try:
        event_id = str(uuid.uuid4())
        audit.sent("dc1", "T", [1_500, 1_600])
        audit.settled("dc1", "T", [1_500], [10], [None], True)
        audit.quarantined("dc1", "T", 1_600, 2_000_000, "too large for the target", event_id)
        counter = audit.counters["dc1"]
        assert counter.in_flight() == 0
        records = {r["properties"].get("quarantined", "mirrored"): r for r in counter.close_windows(10_000)}
        assert records["mirrored"]["count"] == 1 and records["mirrored"]["properties"]["failed"] == "0"
        quarantined = records["too large for the target"]
        assert (quarantined["tier"], quarantined["datacenter"], quarantined["count"]) == ("mirror", "dc1", 1)
        assert EventSketch.from_bytes(quarantined["sketch"]).decode().counts == {event_id: 1}
    finally:
        audit.publisher.producer.close()
        audit.registry.close()
