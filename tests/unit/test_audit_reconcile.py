"""Reconciling one window across the tiers: completeness per tier, and losses and duplicates named at the tier
where they happened (pure logic on real sketches)."""

from __future__ import annotations

import random
import uuid

from audit.reconcile import TierCount, WindowKey, reconcile
from audit.sketch import EventSketch

KEY = WindowKey("PageViewEvent", "dc1", 60_000, 120_000)


def tier(ids: list[str], hosts: int = 1) -> TierCount:
    counted = TierCount()
    for part in range(hosts):
        sketch = EventSketch()
        share = ids[part::hosts]
        sketch.add(share)
        counted.add(len(share), 100 * len(share), sketch)
    return counted


def test_no_fault_is_complete_at_every_tier():
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    result = reconcile(KEY, {"producer": tier(ids, hosts=4), "datacenter": tier(ids), "mirror": tier(ids, 2),
                             "offline": tier(ids), "warehouse": tier(ids)})
    assert result.completeness == dict.fromkeys(["producer", "datacenter", "mirror", "offline", "warehouse"], 1.0)
    assert result.discrepancies == [] and result.complete()


def test_a_loss_and_a_duplicate_are_named_at_the_tier_where_they_happened():
    rng = random.Random(7)
    ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(1000)]
    lost = sorted(rng.sample(ids, 3))
    at_dc = [i for i in ids if i not in lost]
    twice = at_dc[:2]
    mirrored = at_dc + twice  # a mirror restart sent two records again, both acknowledged
    result = reconcile(KEY, {"producer": tier(ids), "datacenter": tier(at_dc), "mirror": tier(mirrored),
                             "offline": tier(mirrored), "warehouse": tier(mirrored)})
    assert result.completeness["datacenter"] == 0.997 and result.completeness["warehouse"] == 0.999
    (dc, mirror) = result.discrepancies
    assert (dc.earlier, dc.later, dc.missing, dc.duplicated) == ("producer", "datacenter", dict.fromkeys(lost, 1), {})
    assert (mirror.earlier, mirror.later, mirror.missing) == ("datacenter", "mirror", {})
    assert mirror.duplicated == dict.fromkeys(sorted(twice), 1)
    assert not result.complete(threshold=0.9)


def test_a_difference_beyond_the_sketch_is_undecoded_and_a_tier_without_ids_compares_counts():
    ids = [str(uuid.uuid4()) for _ in range(2000)]
    no_ids = TierCount()
    no_ids.add(1400, 0, None)
    result = reconcile(KEY, {"producer": tier(ids), "datacenter": tier(ids[:1500]), "mirror": no_ids})
    (big, counts_only) = result.discrepancies
    assert not big.decoded and (counts_only.earlier, counts_only.later) == ("datacenter", "mirror")
    assert not counts_only.decoded and result.undecoded == [big, counts_only]
    assert reconcile(KEY, {"datacenter": tier(ids)}).completeness == {"datacenter": None}


def test_a_tier_expected_but_silent_lost_every_event_of_the_window():
    ids = [str(uuid.uuid4()) for _ in range(3)]
    result = reconcile(KEY, {"producer": tier(ids)}, expected={"datacenter"})
    assert result.counts == {"producer": 3, "datacenter": 0} and result.completeness["datacenter"] == 0.0
    (lost,) = result.discrepancies
    assert lost.later == "datacenter" and lost.missing == dict.fromkeys(sorted(ids), 1) and lost.decoded
