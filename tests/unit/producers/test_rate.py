"""The emulators' audit counter (windows, acknowledged versus failed) and rate controller, as pure logic."""

from __future__ import annotations

import threading

import fastavro
import pytest

from pipeline.auditing.counting import AuditCounter
from pipeline.auditing.latency import LatencyBuckets
from pipeline.config import ConfigError
from producers.config import EmulatorConfig
from producers.rate import RateController
from schemas.events import parsed_schema


EVENT_IDS = [f"00000000-0000-4000-8000-{n:012d}" for n in range(4)]


def counter(window_ms: int = 60_000) -> AuditCounter:
    return AuditCounter(window_ms=window_ms, datacenter="dc1", application="frontend")


def test_counts_per_server_topic_and_window_of_event_time() -> None:
    audit = counter()
    events = [("fe-1", "PageViewEvent", 59_999, 10), ("fe-1", "PageViewEvent", 60_000, 20),
              ("fe-2", "PageViewEvent", 1_000, 30), ("fe-1", "ClickEvent", 2_000, 40)]
    for server, topic, time_ms, _ in events:
        audit.sent(server, topic, time_ms)
    audit.settled(events, acknowledged=True)
    closed = audit.close_windows(120_000)
    assert [(r["host"], r["topic"], r["windowStart"], r["windowEnd"], r["count"], r["bytes"]) for r in closed] == [
        ("fe-1", "ClickEvent", 0, 60_000, 1, 40), ("fe-1", "PageViewEvent", 0, 60_000, 1, 10),
        ("fe-2", "PageViewEvent", 0, 60_000, 1, 30), ("fe-1", "PageViewEvent", 60_000, 120_000, 1, 20)]
    assert all(r["tier"] == "producer" and r["datacenter"] == "dc1" and r["application"] == "frontend" for r in closed)
    for record in closed:
        assert fastavro.validation.validate(record, parsed_schema("AuditCount"))
    assert audit.close_windows(10**12) == []


def test_failed_events_are_counted_apart_never_as_acknowledged() -> None:
    audit = counter()
    for _ in range(5):
        audit.sent("fe-1", "SearchEvent", 5_000)
    audit.settled([("fe-1", "SearchEvent", 5_000, 100)] * 3, acknowledged=True)
    audit.settled([("fe-1", "SearchEvent", 5_000, 7)] * 2, acknowledged=False)
    [record] = audit.close_windows(60_000)
    assert (record["count"], record["bytes"]) == (3, 300)
    record_id = record["properties"].pop("recordId")
    latency = LatencyBuckets.from_text(record["properties"].pop("latency"))
    assert record["properties"] == {"created": "5", "failed": "2", "failedBytes": "14"}
    assert latency.count == 3  # the acknowledged ones, long after their event time (5 s after the epoch)
    assert latency.counts[-1] == 3
    # Another host counting the same tells itself apart (the audit counts copies of one record once).
    twin = counter()
    twin.sent("fe-1", "SearchEvent", 5_000)
    twin.settled([("fe-1", "SearchEvent", 5_000, 100)], acknowledged=True)
    assert len(record_id) == 32 and twin.close_windows(60_000)[0]["properties"]["recordId"] != record_id


def test_a_window_closes_only_after_its_end_and_once_nothing_is_in_flight() -> None:
    audit = counter(1_000)
    audit.sent("fe-1", "ClickEvent", 500)
    audit.sent("fe-1", "ClickEvent", 600)
    audit.settled([("fe-1", "ClickEvent", 500, 1)], acknowledged=True)
    assert audit.close_windows(999) == []
    assert audit.close_windows(5_000) == [], "one event of the window is still in flight"
    assert audit.in_flight() == 1
    audit.settled([("fe-1", "ClickEvent", 600, 1)], acknowledged=True)
    [record] = audit.close_windows(1_000)
    assert record["count"] == 2


def test_a_window_still_in_flight_after_its_settle_time_is_published_and_what_settles_later_follows() -> None:
    audit = counter(1_000)
    for event_time in (100, 200, 300):
        audit.sent("fe-1", "ClickEvent", event_time)
    audit.settled([("fe-1", "ClickEvent", 100, 4)], acknowledged=True, event_ids=[EVENT_IDS[0]])
    assert audit.close_windows(1_500, settle_ms=1_000) == [], "ended, but within its settle time"
    [first] = audit.close_windows(2_000, settle_ms=1_000)
    assert first["count"] == 1 and first["properties"]["created"] == "3"
    assert first["properties"]["unsettled"] == "2" and first["properties"]["failed"] == "0"
    assert audit.close_windows(2_500, settle_ms=1_000) == [], "nothing settled since: nothing to say"
    audit.sent("fe-1", "ClickEvent", 400)  # created late (a SystemMetricsEvent under its due time)
    audit.settled([("fe-1", "ClickEvent", 200, 4)], acknowledged=False, event_ids=[EVENT_IDS[1]])
    [second] = audit.close_windows(3_000, settle_ms=1_000)
    assert second["count"] == 0 and second["properties"]["failed"] == "1" and second["properties"]["created"] == "1"
    assert "unsettled" not in second["properties"], "one settled, one more in flight: no change"
    audit.settled([("fe-1", "ClickEvent", 300, 4), ("fe-1", "ClickEvent", 400, 4)], acknowledged=True,
                  event_ids=EVENT_IDS[2:4])
    [third] = audit.close_windows(3_500, settle_ms=1_000)
    assert third["count"] == 2 and third["properties"]["unsettled"] == "-2" and audit.in_flight() == 0
    records = [first, second, third]
    # The records add up to the window: 4 created, 3 acknowledged, 1 failed, nothing in flight.
    assert sum(int(r["properties"]["created"]) for r in records) == 4
    assert sum(r["count"] for r in records) == 3 and sum(int(r["properties"]["failed"]) for r in records) == 1
    assert sum(int(r["properties"].get("unsettled", 0)) for r in records) == 0
    assert audit.close_windows(10_000, settle_ms=1_000) == []


def test_closing_everything_at_shutdown_reports_what_never_settled() -> None:
    audit = counter()
    audit.sent("fe-1", "ClickEvent", 10)
    audit.sent("fe-1", "ClickEvent", 10)
    audit.settled([("fe-1", "ClickEvent", 10, 5)], acknowledged=True)
    [record] = audit.close_windows(None)
    assert record["count"] == 1 and record["properties"]["unsettled"] == "1"


def test_counting_from_two_threads_loses_nothing() -> None:
    audit = counter(10)
    n = 20_000

    def send() -> None:
        for i in range(n):
            audit.sent("fe-1", "T", i % 100)

    def settle() -> None:
        done = 0
        while done < n:
            settled = min(100, n - done)
            # Settle only what was sent: wait until the sender is ahead.
            while audit.in_flight() < settled:
                pass
            audit.settled([("fe-1", "T", (done + j) % 100, 1) for j in range(settled)], acknowledged=True)
            done += settled

    threads = [threading.Thread(target=send), threading.Thread(target=settle)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(r["count"] for r in audit.close_windows(10**6)) == n


def test_rate_controller_holds_the_schedule_and_catches_up_short_stalls() -> None:
    rate = RateController(1000.0, start=100.0)
    assert rate.due(100.0) == 0
    assert rate.due(100.0105) == 10
    rate.emitted_now(10)
    assert rate.due(100.0105) == 0
    assert rate.next_due() == pytest.approx(100.011)
    # A 0.5 s stall is caught up: the rate over the whole interval stays on target.
    assert rate.due(100.5105) == 500
    rate.emitted_now(500)
    assert rate.skipped == 0


def test_rate_controller_drops_a_backlog_it_cannot_catch_up_and_counts_it() -> None:
    rate = RateController(1000.0, start=0.0, max_backlog_s=1.0)
    assert rate.due(5.0) == 1000
    assert rate.skipped == 4000
    rate.emitted_now(1000)
    assert rate.due(5.0) == 0
    assert rate.due(5.5) == 500


def test_rate_controller_counts_the_backlog_left_at_the_end_of_a_run_that_one_chunk_took() -> None:
    # At 10M events/s one chunk (0.01 s worth) took the whole 3.5 s run on a loaded machine: `due` was not asked
    # again, and the run has to be reported as one that could not keep up.
    rate = RateController(10_000_000.0, start=0.0, max_backlog_s=1.0)
    assert rate.due(0.01) == 100_000
    rate.emitted_now(100_000)
    rate.drop_backlog(3.5)
    assert rate.skipped == 35_000_000 - 100_000 - 10_000_000
    # On schedule, the end of a run drops nothing.
    steady = RateController(40.0, start=0.0)
    for now in (0.5, 1.0, 1.5, 2.0, 2.5, 2.99):
        steady.emitted_now(steady.due(now))
    steady.drop_backlog(3.0)
    assert steady.skipped == 0


def test_emulator_config_requires_one_cluster_and_refuses_acks_0() -> None:
    assert EmulatorConfig({"bootstrap.servers": "h:1"})["audit.window.ms"] == 60_000
    with pytest.raises(ConfigError, match="either"):
        EmulatorConfig({})
    with pytest.raises(ConfigError, match="either"):
        EmulatorConfig({"bootstrap.servers": "h:1", "zookeeper.connect": "z:2"})
    with pytest.raises(ConfigError, match="acks=0"):
        EmulatorConfig({"bootstrap.servers": "h:1", "request.required.acks": "0"})
    with pytest.raises(ConfigError, match="rate"):
        EmulatorConfig({"bootstrap.servers": "h:1", "rate": "-5"})
    producer = EmulatorConfig({"zookeeper.connect": "z:2/dc1", "batch.size": "7"}).producer_config()
    assert producer["zookeeper.connect"] == "z:2/dc1" and producer["batch.size"] == 7
    assert producer["producer.type"] == "async" and "metadata.broker.list" not in producer
    # acks=all with idempotence by default: a retried batch is stored once.
    assert producer["request.required.acks"] == -1 and producer["enable.idempotence"] is True
    assert producer["delivery.timeout.ms"] == 120_000
    with pytest.raises(ConfigError, match="enable.idempotence=true needs request.required.acks=-1"):
        EmulatorConfig({"bootstrap.servers": "h:1", "request.required.acks": "1"})
    assert EmulatorConfig({"bootstrap.servers": "h:1", "request.required.acks": "1",
                           "enable.idempotence": "false"}).producer_config()["request.required.acks"] == 1


def test_the_shipped_properties_files_are_valid() -> None:
    from pathlib import Path

    from schemas.registry.config import RegistryConfig

    config_dir = Path(__file__).resolve().parents[3] / "config"
    emulator = EmulatorConfig(config_dir / "producers-dc1.properties")
    assert emulator["zookeeper.connect"] == "127.0.0.1:2181/dc1" and emulator["request.required.acks"] == -1
    assert RegistryConfig(config_dir / "schema-registry.properties")["port"] == 8081


def test_the_emulator_counts_and_timestamps_each_event_under_its_own_event_time() -> None:
    # A SystemMetricsEvent carries its due time, which may lie in the window before the one it is sent in: the
    # audit service and the ETL count it under that time, so the emulator (and through the record's timestamp,
    # the mirror) must too.
    from producers.emulator import EmulatedEvent, FrontendEmulator
    from producers.workload import Event

    emulator = FrontendEmulator(EmulatorConfig({"bootstrap.servers": "h:1", "audit.window.ms": 1000,
                                                "schema.registry.url": "http://127.0.0.1:9"}))

    def event(topic: str, event_time: int, n: int) -> Event:
        return Event(topic, b"k", {"header": {"eventId": f"00000000-0000-4000-8000-{n:012d}", "eventTime": event_time}}, "fe-1")

    sent = []
    events = [event("SystemMetricsEvent", 1_999, 0), event("PageViewEvent", 2_004, 1),
              event("SystemMetricsEvent", 2_001, 2)]
    emulator._send(events, sent.append, lambda topic, values: [repr(v).encode() for v in values])
    # One ProducerData per topic and key, each event timestamped with its own time.
    assert [(d.topic, d.key, d.timestamps, [m.event_time for m in d.messages]) for d in sent] == [
        ("SystemMetricsEvent", b"k", [1_999, 2_001], [1_999, 2_001]), ("PageViewEvent", b"k", [2_004], [2_004])]
    emitted: list[EmulatedEvent] = [m for d in sent for m in d.messages]
    emulator.audit.settled([(e.server, e.topic, e.event_time, len(e.encoded)) for e in emitted], True,
                           [e.event_id for e in emitted])
    assert sorted((r["topic"], r["windowStart"], r["count"]) for r in emulator.audit.close_windows(10_000)) == [
        ("PageViewEvent", 2_000, 1), ("SystemMetricsEvent", 1_000, 1), ("SystemMetricsEvent", 2_000, 1)]


def test_the_producer_tier_counts_every_event_created_and_names_the_failed_ones() -> None:
    # docs/accounting.md: count/sketch the acknowledged events; created = acknowledged + failed; the failed ids in
    # failedSketch (base64), so that the audit can name them lost at the producer tier.
    import base64
    import uuid

    from pipeline.auditing.sketch import EventSketch

    audit = counter()
    acked, failed = [str(uuid.uuid4()) for _ in range(4)], [str(uuid.uuid4()) for _ in range(3)]
    audit.sent("fe-1", "ClickEvent", 1_000, n=7)
    audit.settled([("fe-1", "ClickEvent", 1_000, 10)] * 4, True, acked)
    audit.settled([("fe-1", "ClickEvent", 1_000, 5)] * 3, False, failed)
    [record] = audit.close_windows(60_000)
    assert record["count"] == 4 and record["properties"]["created"] == "7" and record["properties"]["failed"] == "3"
    assert EventSketch.from_bytes(record["sketch"]).decode().counts == {i: 1 for i in acked}
    failed_sketch = EventSketch.from_bytes(base64.b64decode(record["properties"]["failedSketch"]))
    assert failed_sketch.decode().counts == {i: 1 for i in failed}
    assert fastavro.validation.validate(record, parsed_schema("AuditCount"))
    # Nothing failed: no failedSketch.
    audit.sent("fe-1", "ClickEvent", 1_000)
    audit.settled([("fe-1", "ClickEvent", 1_000, 10)], True, [str(uuid.uuid4())])
    [clean] = audit.close_windows(60_000)
    assert clean["properties"]["created"] == "1" and "failedSketch" not in clean["properties"]


def test_quarantined_records_are_counted_in_quarantine_records_per_reason() -> None:
    import uuid

    from pipeline.auditing.sketch import EventSketch

    audit = AuditCounter(window_ms=1_000, datacenter="dc1", application="mirror", tier="mirror")
    named = [str(uuid.uuid4()) for _ in range(2)]
    audit.quarantined("m", "PageViewEvent", 1_500, 2_000_000, "too large for the target", named[0])
    audit.quarantined("m", "PageViewEvent", 1_700, 2_000_000, "too large for the target", named[1])
    audit.quarantined("m", "PageViewEvent", 1_800, 30, "too large for the target", None)
    audit.quarantined("m", "PageViewEvent", 1_900, 30, "invalid record", None)
    taken = audit.take_counted()
    by_reason = {r["properties"]["quarantined"]: r for r in taken}
    assert set(by_reason) == {"too large for the target", "invalid record"}
    large = by_reason["too large for the target"]
    assert (large["tier"], large["topic"], large["windowStart"], large["windowEnd"], large["datacenter"]) == (
        "mirror", "PageViewEvent", 1_000, 2_000, "dc1")
    assert large["count"] == 2 and large["properties"]["withoutId"] == "1" and large["bytes"] == 4_000_030
    assert EventSketch.from_bytes(large["sketch"]).decode().counts == {i: 1 for i in named}
    invalid = by_reason["invalid record"]
    assert invalid["count"] == 0 and invalid["sketch"] is None and invalid["properties"]["withoutId"] == "1"
    assert all(len(r["properties"]["recordId"]) == 32 and "latency" in r["properties"] for r in taken)
    for record in taken:
        assert fastavro.validation.validate(record, parsed_schema("AuditCount"))
    assert audit.take_counted() == [] and audit.close_windows(None) == []


def test_an_event_refused_at_send_is_counted_failed_with_its_id_and_every_event_is_listed(tmp_path) -> None:
    import base64
    import os
    import stat

    from pipeline.auditing.sketch import EventSketch
    from pipeline.client.errors import KafkaClientError
    from producers.created_log import CreatedLog
    from producers.emulator import FrontendEmulator, settle
    from producers.workload import Event

    emulator = FrontendEmulator(EmulatorConfig({"bootstrap.servers": "h:1", "audit.window.ms": 1000,
                                                "schema.registry.url": "http://127.0.0.1:9"}))
    emulator._created_log = CreatedLog(tmp_path / "logs" / "created.log")
    ids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(3)]
    # Events of one key go in one ProducerData: the second's key is refused.
    events = [Event("ClickEvent", b"k%d" % n, {"header": {"eventId": i, "eventTime": 2_000 + n}}, "fe-1")
              for n, i in enumerate(ids)]

    taken = []

    def send(data) -> None:
        if data.key == b"k1":
            raise KafkaClientError("the queue is full")
        taken.extend(data.messages)

    emulator._send(events, send, lambda topic, values: [repr(v).encode() for v in values])
    emulator._created_log.close()
    # What the producer took is acknowledged later, by its callback.
    settle(taken, True, emulator.audit, emulator.metrics)
    [record] = emulator.audit.close_windows(None)
    assert record["properties"]["created"] == "3" and record["properties"]["failed"] == "1"
    failed = EventSketch.from_bytes(base64.b64decode(record["properties"]["failedSketch"]))
    assert failed.decode().counts == {ids[1]: 1}
    path = tmp_path / "logs" / "created.log"
    assert path.read_text().splitlines() == [f"{i} ClickEvent {2_000 + n}" for n, i in enumerate(ids)]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_audit_counts_are_published_with_acks_all_and_idempotence_by_default() -> None:
    from prometheus_client import CollectorRegistry, Counter

    from pipeline.auditing.publisher import AuditPublisher
    from schemas.registry_client import SchemaRegistryClient
    from schemas.serde import audit_count_encoder

    registry = CollectorRegistry()
    metrics = {"published": Counter("p", "p", registry=registry), "failures": Counter("f", "f", registry=registry)}
    client = SchemaRegistryClient("http://127.0.0.1:9")
    publisher = AuditPublisher({"metadata.broker.list": "127.0.0.1:9"}, audit_count_encoder(client, "AuditCount"),
                               "AuditCount", **metrics)
    try:
        config = publisher.producer.config
        assert config.acks == -1 and config.idempotent and config.delivery_timeout_s == 10.0
    finally:
        publisher.producer.close()
        client.close()


def chunks_made(rate: float, duration_s: float) -> list[int]:
    """The event counts the emulator asked the workload for, running at `rate` for `duration_s` without a broker."""
    import threading
    import types

    from producers.emulator import FrontendEmulator

    emulator = FrontendEmulator(EmulatorConfig({"bootstrap.servers": "h:1", "rate": rate, "duration.s": duration_s,
                                                "schema.registry.url": "http://127.0.0.1:9"}))
    emulator.encoder = types.SimpleNamespace(encode_for=lambda topic, values: [b"x"] * len(values))
    chunks = []
    next_events = emulator.workload.next_events

    def counted(now_ms: int, count: int) -> list:
        chunks.append(count)
        return next_events(now_ms, count)

    emulator.workload.next_events = counted  # type: ignore[method-assign]
    producer = types.SimpleNamespace(send=lambda data: None)
    publisher = types.SimpleNamespace(publish=lambda records: None)
    emulator._publish(producer, publisher, threading.Event())  # type: ignore[arg-type]
    return chunks


def test_at_a_low_rate_the_emulator_makes_chunks_of_events_not_one_per_wake_up() -> None:
    chunks = chunks_made(400, 1.0)
    # 400 events/s over a second: a chunk per 20 ms (two, after a wake-up late by more than 50 ms: a chunk holds at
    # most 50 ms of events, 20) instead of one per event due every 2.5 ms.
    assert 0 < len(chunks) <= 100 and max(chunks) <= 20
    assert sum(chunks) <= 400


def test_at_a_rate_out_of_reach_a_chunk_holds_at_most_ten_thousand_events() -> None:
    chunks = chunks_made(10_000_000, 0.2)
    assert chunks and max(chunks) == 10_000
