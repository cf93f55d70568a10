"""AuditCounter.settled over a batch (grouped by window, the lock taken once) says exactly what settling the same
outcomes one at a time says: counts, bytes, latency buckets and sums, sketches of acknowledged and failed ids."""

from __future__ import annotations

import random
import uuid

import pytest

from pipeline.auditing import counting
from pipeline.auditing.counting import AuditCounter
from pipeline.auditing.latency import LatencyBuckets


def records(counter: AuditCounter) -> list[dict]:
    out = counter.close_windows(None)
    for record in out:
        record["properties"].pop("recordId")
    return out


@pytest.mark.parametrize("seed", range(10))
def test_a_batch_settles_as_its_outcomes_one_by_one(seed, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(counting.time, "time", lambda: 1_800_000_000.123)
    batches = []
    for _ in range(rng.randint(1, 12)):
        outcomes, ids = [], []
        for _ in range(rng.choice([1, 5, 50, 300])):
            event_time = 1_800_000_000_000 - rng.choice([0, 1, 900, 1000, 61_000, 4_000_000, -5000])
            outcomes.append((rng.choice(["fe-1", "fe-2"]), rng.choice(["PageViewEvent", "SearchEvent"]), event_time,
                             rng.randint(1, 500)))
            ids.append(rng.choice([None, str(uuid.UUID(int=rng.getrandbits(128))), uuid.uuid4().bytes]))
        batches.append((outcomes, rng.random() < 0.7, ids if rng.random() < 0.8 else None))
    together = AuditCounter(window_ms=60_000, datacenter="dc1", application="frontend")
    apart = AuditCounter(window_ms=60_000, datacenter="dc1", application="frontend")
    for counter in (together, apart):
        for outcomes, _, _ in batches:
            for server, topic, event_time, _ in outcomes:
                counter.sent(server, topic, event_time)
    for outcomes, acknowledged, ids in batches:
        together.settled(outcomes, acknowledged, ids)
        for n, outcome in enumerate(outcomes):
            apart.settled([outcome], acknowledged, None if ids is None else [ids[n]])
    assert together.in_flight() == apart.in_flight()
    assert records(together) == records(apart)


def test_add_all_is_add_of_each_in_order():
    rng = random.Random(3)
    seconds = [rng.choice([-1.0, 0.0, 0.1, 0.25, 3599.0, 1e6]) + rng.random() for _ in range(1000)]
    one, each = LatencyBuckets(), LatencyBuckets()
    one.add_all(seconds)
    for s in seconds:
        each.add(s)
    assert (one.counts, one.total) == (each.counts, each.total)
