"""EventCounter.count_all counts a batch exactly as counting its records one at a time did (the audit before
batches): the same counts, bytes, sketches and latencies per window, the batch cut at the first record that is
not an event (null value, not the wire format, truncated, an event id that is not a UUID), and through the
reader the same records skipped with the same reasons, the same positions."""

from __future__ import annotations

import io
import random
import struct
import threading
import uuid

import fastavro
import numpy as np
import pytest

from audit import readers
from audit.readers import ClusterReader, EventCounter
from audit.records import UnreadableRecord
from audit.state import CheckpointedCounts
from pipeline.auditing.latency import LatencyBuckets
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.topic_filter import Whitelist
from schemas.events import parsed_schema
from schemas.serde import event_key
from tests.support.audit_streams import ScriptedConnector
from tests.support.polling import wait_until

NOW_S = 1_800_000_000.5
WINDOW_MS = 60_000


def event(event_id: str, event_time: int, datacenter: str) -> bytes:
    header = {"eventId": event_id, "eventTime": event_time, "server": "fe-1", "datacenter": datacenter,
              "service": "frontend", "sequence": 7}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed_schema("EventHeader"), header)
    return struct.pack(">bI", 0, 42) + out.getvalue() + b"the rest of the event"


def random_records(rng: random.Random, n: int, malformed: float) -> list[ConsumerRecord]:
    out = []
    for offset in range(n):
        event_id = str(uuid.UUID(int=rng.getrandbits(128)))
        event_time = int(NOW_S * 1000) - rng.choice([0, 5, 59_999, 60_000, 3_600_000, -120_000])
        value: bytes | None = event(event_id, event_time, rng.choice(["dc1", "dc2"]))
        if rng.random() < malformed:
            value = rng.choice([
                None, b"", b"plain text", value[:30], b"\x01" + value[1:],
                event("z" * 36, event_time, "dc1"), event(event_id[:-1] + " ", event_time, "dc1"),
                event(event_id.replace("-", "") + "abcd", event_time, "dc1")])
        elif rng.random() < 0.1:
            value = event(event_id.upper(), event_time, "dc1")
        key = rng.choice([None, b"", b"member-42"])
        out.append(ConsumerRecord(rng.choice(["PageViewEvent", "SearchEvent"]), rng.randint(0, 2), offset, 0, key,
                                  value, ()))
    return out


def one_by_one(counts: CheckpointedCounts, latencies: dict, record: ConsumerRecord) -> None:
    """The audit's counting of one record before batches."""
    value = record.value
    if value is None:
        raise UnreadableRecord("null value", "a record without a value")
    found = event_key(value)
    if found is None:
        raise UnreadableRecord("not an event", "no EventHeader in the Confluent wire format")
    try:
        event_id = bytes.fromhex(found.event_id.replace("-", ""))
    except ValueError:
        event_id = b""
    if len(event_id) != 16:  # (the audit before batches failed on these, later, in the sketch)
        raise UnreadableRecord("not an event", f"event id {found.event_id!r} is not a UUID")
    start = found.event_time - found.event_time % WINDOW_MS
    size = len(value) + (0 if record.key is None else len(record.key))
    counts.count(("datacenter", record.topic, found.datacenter, start), size, event_id)
    latencies.setdefault(record.topic, LatencyBuckets()).add(NOW_S - found.event_time / 1000)


def state(counts: CheckpointedCounts) -> dict:
    return {k: (c.count, c.bytes, c.hosts, None if c.sketch is None else c.sketch.cells.tolist())
            for k, c in counts.snapshot().items()}


@pytest.fixture
def fixed_clock(monkeypatch):
    monkeypatch.setattr(readers.time, "time", lambda: NOW_S)


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_counts_as_its_records_one_by_one_up_to_the_first_that_is_no_event(seed, tmp_path, fixed_clock):
    rng = random.Random(seed)
    records = random_records(rng, 3000, malformed=rng.choice([0.0, 0.01, 0.1]))
    batched = CheckpointedCounts(tmp_path / "batched", 10**12, lambda: 0)
    alone = CheckpointedCounts(tmp_path / "alone", 10**12, lambda: 0)
    observed: dict[str, LatencyBuckets] = {}
    counter = EventCounter("datacenter", batched, WINDOW_MS,
                           lambda topic, tier, seconds: observed.setdefault(topic, LatencyBuckets()).add_all(seconds))
    expected: dict[str, LatencyBuckets] = {}
    reasons, want_reasons = [], []
    for record in records:
        try:
            one_by_one(alone, expected, record)
        except UnreadableRecord as exc:
            want_reasons.append((record.offset, exc.reason))
    position = 0
    while position < len(records):
        size = rng.choice([1, 2, 50, 500, 2000])
        done, error = counter.count_all(records[position:position + size])
        position += done
        if error is not None:
            reasons.append((records[position].offset, error.reason))
            position += 1
        else:
            assert done == len(records[position - done:position])
    assert reasons == want_reasons
    assert state(batched) == state(alone)
    assert {t: (b.counts, round(b.total, 6)) for t, b in observed.items()} == \
           {t: (b.counts, round(b.total, 6)) for t, b in expected.items()}
    batched.close()
    alone.close()


def test_one_record_that_is_no_event_raises_as_before(tmp_path):
    counts = CheckpointedCounts(tmp_path / "c", 10**12, lambda: 0)
    counter = EventCounter("datacenter", counts, WINDOW_MS)
    for value, reason in ((None, "null value"), (b"x", "not an event"), (event("z" * 36, 0, "dc1"), "not an event")):
        with pytest.raises(UnreadableRecord) as raised:
            counter(ConsumerRecord("T", 0, 0, 0, None, value, ()))
        assert raised.value.reason == reason
    assert counts.snapshot() == {}
    counts.close()


def test_the_reader_skips_and_positions_as_one_by_one(tmp_path, fixed_clock):
    records = random_records(random.Random(11), 400, malformed=0.05)
    want: list[str] = []
    expected = CheckpointedCounts(tmp_path / "expected", 10**12, lambda: 0)
    for record in records:
        try:
            one_by_one(expected, {}, record)
        except UnreadableRecord as exc:
            want.append(exc.reason)
    counts = CheckpointedCounts(tmp_path / "dc1-events", 10**12, lambda: 0)
    skipped: list[tuple[str, str]] = []
    connector = ScriptedConnector(list(records), batch=37)
    counter = EventCounter("datacenter", counts, WINDOW_MS)
    reader = ClusterReader("dc1-events", connector, Whitelist(".*"), counts, counter, checkpoint_s=0.01,
                           on_skip=lambda name, reason: skipped.append((name, reason)))
    stop = threading.Event()
    reader.start(stop)
    try:
        wait_until(lambda: connector.ran_out and reader.records + reader.skipped == len(records), timeout=30)
        last = {}
        for record in records:
            last[(record.topic, record.partition)] = record.offset + 1
        wait_until(lambda: reader.positions() == last, timeout=30)
        assert [reason for _, reason in skipped] == want and reader.skipped == len(want)
        assert {k: v[:3] for k, v in state(counts).items()} == {k: v[:3] for k, v in state(expected).items()}
        assert all(np.array_equal(counts.snapshot()[k].sketch.cells, s.sketch.cells)
                   for k, s in expected.snapshot().items())
    finally:
        stop.set()
        reader.join(10)
        expected.close()
