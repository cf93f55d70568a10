"""The mirror's audit counts taken a fetched batch at a time: the same windows as counting record by record."""

from __future__ import annotations

import random
import uuid
from typing import Iterator

import pytest

from mirror.audit import MirrorAudit
from mirror.metrics import MirrorMetrics
from pipeline.auditing.counting import AuditCounter
from schemas.serde import MAGIC_BYTE


@pytest.fixture
def audit() -> Iterator[MirrorAudit]:
    audit = MirrorAudit(["dc1"], window_ms=1_000, producer_config={"metadata.broker.list": "127.0.0.1:9"},
                        registry_url="http://127.0.0.1:9", topic="AuditCount", metrics=MirrorMetrics(),
                        transactional=True)
    yield audit
    audit.registry.close()


def event(event_id: str, event_time: int) -> bytes:
    """The first bytes of an event in the wire format: its header's id, time, server and datacenter."""
    def varint(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n > 0x7F:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))

    def string(text: str) -> bytes:
        return varint(len(text)) + text.encode()

    return bytes([MAGIC_BYTE]) + b"\0\0\0\1" + string(event_id) + varint(event_time) + string("s") + string("dc1")


def test_batches_count_in_the_windows_records_counted_one_by_one_fall_in(audit: MirrorAudit) -> None:
    rng = random.Random(3)
    expected = AuditCounter(window_ms=1_000, datacenter="dc1", application="mirror", tier="mirror")
    ids = []
    for _ in range(40):
        # Small batches (read one by one) and large ones (read at once), with tombstones and values that are no
        # event among them.
        times = sorted(rng.randint(0, 5_000) if rng.random() < 0.3 else 2_000 + rng.randint(0, 999)
                       for _ in range(rng.randint(1, 10) if rng.random() < 0.5 else rng.randint(8, 300)))
        batch_ids = [str(uuid.uuid4()) for _ in times]
        values = [event(i, t) if n % 5 else None for n, (i, t) in enumerate(zip(batch_ids, times))]
        for n in rng.sample(range(len(values)), len(values) // 7):
            values[n] = rng.choice([b"", b"not an event", event(batch_ids[n], times[n])[:30]])
        sizes = [0 if v is None else len(v) for v in values]
        audit.sent("dc1", "T", times)
        for t in times:
            expected.sent(audit.host, "T", t)
        acknowledged = rng.random() < 0.8
        audit.settled("dc1", "T", times, sizes, values, acknowledged)
        known = [i if v and len(v) > 30 and acknowledged else None for i, v in zip(batch_ids, values)]
        expected.settled([(audit.host, "T", t, s) for t, s in zip(times, sizes)], acknowledged, known)
        ids += [i for i in known if i is not None]
    got, want = audit.counters["dc1"].close_windows(None), expected.close_windows(None)
    for record in got + want:
        record["properties"].pop("recordId", None)
        record["properties"].pop("latency", None)
    # The expected sketches hold the ids the values were made with (too many to decode from sketches this size).
    assert got == want, "the same counts, bytes and sketches (of the ids read from the values)"
    assert sum(1 for record in got if record["sketch"]) and len(ids) > 1_000


def test_an_empty_batch_counts_nothing(audit: MirrorAudit) -> None:
    audit.sent("dc1", "T", [])
    assert audit.counters["dc1"].in_flight() == 0
