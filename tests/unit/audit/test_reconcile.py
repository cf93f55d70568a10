"""Reconciling one window across the tiers as docs/accounting.md says: completeness against the events created,
losses named at the tier where they happened (the producer tier for events that failed there), duplicates at the
data tier where the extra copy appears, quarantined events with their tier and reason, pending tiers never compared,
events no producer created told from duplicates once their cluster was read back (unexpected), and the identity
checked (pure logic on real sketches)."""

from __future__ import annotations

import random
import uuid

from audit.measures import failed_measure, quarantine_measure
from audit.reconcile import (COMPLETE, INCOMPLETE, PENDING, TIERS, TierCount, WindowKey, account, reconcile,
                             split_unexpected)
from audit.results import result_from_json, result_to_json
from pipeline.auditing.sketch import EventSketch

KEY = WindowKey("PageViewEvent", "dc1", 60_000, 120_000)


def tier(ids: list[str], hosts: int = 1, with_ids: bool = True) -> TierCount:
    counted = TierCount()
    for part in range(hosts):
        share = ids[part::hosts]
        sketch = None
        if with_ids:
            sketch = EventSketch()
            sketch.add(share)
        counted.add(len(share), 100 * len(share), sketch)
    return counted


def new_ids(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(n)]


def test_no_fault_is_complete_at_every_tier_and_the_identity_holds():
    ids = new_ids(1000)
    result = reconcile(KEY, {"producer": tier(ids, hosts=4), "datacenter": tier(ids), "mirror": tier(ids, 2),
                             "offline": tier(ids), "warehouse": tier(ids)})
    assert result.completeness == dict.fromkeys(TIERS, 1.0)
    assert result.discrepancies == [] and result.complete() and result.state == COMPLETE
    assert (result.identity.tier, result.identity.created, result.identity.held) == ("warehouse", 1000, 1000)
    assert result.identity.holds and not result.unaccounted
    assert set(result.tier_states().values()) == {"complete"}


def test_a_loss_is_named_at_its_tier_and_a_duplicate_at_the_data_tier_where_the_extra_copy_appears():
    ids = new_ids(1000)
    lost = sorted(random.Random(3).sample(ids, 3))
    at_dc = [i for i in ids if i not in lost]
    twice = at_dc[:2]
    mirrored = at_dc + twice  # a mirror restart sent two records again, both acknowledged
    result = reconcile(KEY, {"producer": tier(ids), "datacenter": tier(at_dc), "mirror": tier(mirrored),
                             "offline": tier(mirrored), "warehouse": tier(mirrored)})
    assert result.completeness["datacenter"] == 0.997 and result.completeness["warehouse"] == 0.999
    assert result.lost == {"datacenter": dict.fromkeys(lost, 1)}
    assert result.duplicated == {"offline": dict.fromkeys(sorted(twice), 1)}  # not again at the warehouse
    steps = {(d.earlier, d.later): d for d in result.discrepancies}
    assert steps[("producer", "datacenter")].missing == dict.fromkeys(lost, 1)
    assert steps[("datacenter", "offline")].duplicated == dict.fromkeys(sorted(twice), 1)
    assert ("offline", "warehouse") not in steps
    assert result.identity.holds and (result.identity.duplicates, result.identity.lost) == (2, 3)
    assert result.state == INCOMPLETE and not result.complete(threshold=0.9)
    states = result.tier_states()
    assert (states["producer"], states["datacenter"], states["offline"], states["warehouse"]) == (
        "complete", "lost", "duplicated", "short")


def test_events_that_failed_at_the_producer_are_lost_there_unless_they_reached_the_cluster_after_all():
    acknowledged, failed = new_ids(500), new_ids(4, seed=8)
    arrived_anyway = failed[0]  # its acknowledgement was lost, the broker has it
    held = acknowledged + [arrived_anyway]
    counts = {"producer": tier(acknowledged), failed_measure("producer"): tier(failed),
              "datacenter": tier(held), "offline": tier(held)}
    result = reconcile(KEY, counts)
    assert result.counts["producer"] == 504 and result.acknowledged == 500
    assert result.lost == {"producer": dict.fromkeys(sorted(failed[1:]), 1)}
    assert result.duplicated == {} and result.identity.holds
    assert result.completeness["datacenter"] == 501 / 504


def test_a_mirror_that_under_counted_does_not_make_the_tiers_after_it_look_lost():
    ids = new_ids(300)
    # The mirror was killed before it published the counts of 20 records the offline cluster acknowledged.
    result = reconcile(KEY, {"producer": tier(ids), "datacenter": tier(ids), "mirror": tier(ids[20:]),
                             "offline": tier(ids), "warehouse": tier(ids)})
    assert result.lost == {} and result.duplicated == {} and result.identity.holds
    assert result.tier_states()["mirror"] == "short" and result.tier_states()["offline"] == "complete"
    # An event the mirror never copied is lost at the mirror, the first tier without it.
    copied = ids[1:]
    lost = reconcile(KEY, {"producer": tier(ids), "datacenter": tier(ids), "mirror": tier(copied),
                           "offline": tier(copied)})
    assert lost.lost == {"mirror": {ids[0]: 1}} and lost.identity.tier == "offline" and lost.identity.holds


def test_quarantined_events_are_named_with_their_tier_and_reason_and_are_not_lost():
    ids = new_ids(200)
    too_large, bad_value = ids[:1], ids[1:3]
    offline = ids[1:]
    loaded = ids[3:]
    counts = {"producer": tier(ids), "datacenter": tier(ids), "mirror": tier(offline), "offline": tier(offline),
              "warehouse": tier(loaded),
              quarantine_measure("mirror", "too large for the target"): tier(too_large),
              quarantine_measure("warehouse", "undecodable value"): tier(bad_value),
              quarantine_measure("warehouse", "not in the Confluent wire format", with_id=False): TierCount(4)}
    result = reconcile(KEY, counts)
    assert result.lost == {} and result.duplicated == {}
    named = [(q.tier, q.reason, q.count, q.without_id, q.ids) for q in result.quarantined]
    assert named == [("mirror", "too large for the target", 1, 0, {too_large[0]: 1}),
                     ("warehouse", "not in the Confluent wire format", 0, 4, {}),
                     ("warehouse", "undecodable value", 2, 0, dict.fromkeys(bad_value, 1))]
    assert result.identity.holds and result.identity.quarantined == 3 and result.state == INCOMPLETE
    assert result.tier_states()["warehouse"] == "quarantined" and result.quarantined_at("warehouse") == 6
    # Replayed once fixed: the ETL loads the two rows and takes them out of its quarantine (a negative record).
    replayed = tier(bad_value)
    replayed.sketch = EventSketch() - replayed.sketch
    replayed.count = -2
    quarantine = quarantine_measure("warehouse", "undecodable value")
    counts[quarantine] = TierCount(counts[quarantine].count + replayed.count, 0,
                                   counts[quarantine].sketch + replayed.sketch, 2)
    counts["warehouse"] = tier(ids[1:])
    again = reconcile(KEY, counts)
    assert [(q.tier, q.reason) for q in again.quarantined] == [("mirror", "too large for the target"),
                                                               ("warehouse", "not in the Confluent wire format")]
    assert again.lost == {} and again.duplicated == {} and again.identity.holds


def test_pending_tiers_are_not_compared_and_name_nothing_until_ready():
    ids = new_ids(100)
    behind = ids[:40]  # the mirror and the offline cluster are far behind
    counts = {"producer": tier(ids), "datacenter": tier(ids), "mirror": tier(behind), "offline": tier(behind)}
    pending = reconcile(KEY, counts, ready={"producer", "datacenter"})
    assert pending.state == PENDING and sorted(pending.pending) == ["mirror", "offline"]
    assert pending.lost == {} and pending.identity is None and pending.discrepancies == []
    assert pending.tier_states()["mirror"] == "pending" and pending.counts["offline"] == 40
    # Once they are ready (they caught up), the window is complete.
    counts.update({"mirror": tier(ids), "offline": tier(ids)})
    assert reconcile(KEY, counts, ready=set(TIERS)).state == COMPLETE
    # A loss at a ready data tier is named while later tiers are still pending.
    short = reconcile(KEY, {**counts, "datacenter": tier(ids[1:])}, ready={"producer", "datacenter"})
    assert short.state == PENDING and short.lost == {"datacenter": {ids[0]: 1}}


def test_failures_beyond_the_failed_sketch_are_lost_at_the_producer_by_count_and_today_s_records_too():
    acknowledged, failed = new_ids(1000), new_ids(400, seed=9)
    counts = {"producer": tier(acknowledged), failed_measure("producer"): tier(failed),
              "datacenter": tier(acknowledged), "offline": tier(acknowledged)}
    result = reconcile(KEY, counts)
    assert result.lost == {} and result.lost_by_count == {"producer": 400}
    assert result.identity.holds and result.identity.lost == 400 and result.undecoded == []
    # A producer record of today: `failed` without a failed sketch.
    legacy = reconcile(KEY, {**counts, failed_measure("producer"): tier(failed[:5], with_ids=False)})
    assert legacy.lost_by_count == {"producer": 5} and legacy.counts["producer"] == 1005 and legacy.identity.holds


def test_a_difference_beyond_the_sketch_is_undecoded_and_a_tier_without_ids_compares_counts():
    ids = new_ids(2000)
    result = reconcile(KEY, {"producer": tier(ids), "datacenter": tier(ids[:1500]),
                             "offline": tier(ids[:1400], with_ids=False)})
    (big, counts_only) = result.discrepancies
    assert not big.decoded and (counts_only.earlier, counts_only.later) == ("datacenter", "offline")
    assert not counts_only.decoded and result.undecoded == [big, counts_only]
    assert result.identity is None and result.state == INCOMPLETE and result.tier_states()["datacenter"] == "lost"
    assert reconcile(KEY, {"datacenter": tier(ids)}).completeness == {"datacenter": None}


def test_a_tier_expected_but_silent_lost_every_event_of_the_window():
    ids = new_ids(3)
    result = reconcile(KEY, {"producer": tier(ids)}, expected={"datacenter"})
    assert result.counts == {"producer": 3, "datacenter": 0} and result.completeness["datacenter"] == 0.0
    assert result.lost == {"datacenter": dict.fromkeys(sorted(ids), 1)} and result.identity.holds


def test_counts_that_their_ids_do_not_add_up_to_leave_the_window_unaccounted():
    ids = new_ids(50)
    loaded = ids[2:]
    # A quarantine record says two events were set aside but its sketch names one.
    counts = {"producer": tier(ids), "datacenter": tier(ids), "offline": tier(ids), "warehouse": tier(loaded),
              quarantine_measure("warehouse", "null value"): TierCount(2, 0, tier(ids[:1]).sketch, 1)}
    result = reconcile(KEY, counts)
    assert result.lost == {"warehouse": {ids[1]: 1}}
    assert result.unaccounted and result.state == INCOMPLETE and result.tier_states()["warehouse"] == "lost"


def test_an_event_no_producer_created_is_unexpected_once_its_cluster_holds_no_more_copies_than_named():
    # dc1 holds every event created, one of them twice (a retry), and one event no audited producer created (as
    # `chaos poison-record` writes); the mirror copies both on, and the ETL quarantines the foreign one.
    ids = new_ids(500)
    foreign, twice = new_ids(1, seed=11)[0], ids[4]
    held = ids + [twice, foreign]
    result = reconcile(KEY, {"producer": tier(ids), "datacenter": tier(held), "mirror": tier(held),
                             "offline": tier(held), "warehouse": tier(ids + [twice]),
                             quarantine_measure("warehouse", "unknown schema id"): tier([foreign])})
    # The sketches alone cannot tell them apart: both are one extra copy at the datacenter tier.
    assert result.duplicated == {"datacenter": {twice: 1, foreign: 1}} and result.unexpected == {}
    step = next(d for d in result.discrepancies if d.later == "datacenter")

    # The datacenter cluster read back: the foreign event held once (as many as its extra copies), the other twice.
    assert split_unexpected(step, {twice: 2, foreign: 1}) == {foreign: 1}
    account(result)
    assert result.duplicated == {"datacenter": {twice: 1}} and result.unexpected == {"datacenter": {foreign: 1}}
    assert [(q.tier, q.reason, q.ids) for q in result.quarantined] == [("warehouse", "unknown schema id", {foreign: 1})]
    assert result.lost == {} and result.state == INCOMPLETE
    # The warehouse holds 501 rows: - 1 duplicate - 1 unexpected + 1 quarantined = 500 created.
    identity = result.identity
    assert (identity.held, identity.duplicates, identity.unexpected, identity.quarantined) == (501, 1, 1, 1)
    assert identity.holds and identity.created == 500
    assert result.tier_states()["datacenter"] == "duplicated"  # a real duplicate outranks the foreign event

    # Stored and read back as such (and an older line, without the field, reads as none unexpected).
    again = result_from_json(result_to_json(result, 0))
    assert again.unexpected == result.unexpected and again.identity == identity
    assert [d.unexpected for d in again.discrepancies] == [d.unexpected for d in result.discrepancies]
    older = result_to_json(result, 0)
    del older["unexpected"], older["identity"]["unexpected"]
    assert result_from_json(older).unexpected == {}


def test_unexpected_alone_is_its_own_tier_state_and_a_read_back_that_saw_too_few_copies_tells_nothing():
    ids = new_ids(100)
    foreign = new_ids(2, seed=12)
    counts = {"producer": tier(ids), "datacenter": tier(ids + foreign), "offline": tier(ids + foreign)}
    result = reconcile(KEY, counts)
    step = result.discrepancies[0]
    # One of them not seen at all by the read (appended past its horizon): it stays duplicated.
    assert split_unexpected(step, {foreign[0]: 1}) == {foreign[0]: 1}
    account(result)
    assert result.unexpected == {"datacenter": {foreign[0]: 1}} and result.duplicated == {"datacenter":
                                                                                            {foreign[1]: 1}}
    result = reconcile(KEY, counts)
    split_unexpected(result.discrepancies[0], dict.fromkeys(foreign, 1))
    account(result)
    assert result.duplicated == {} and result.unexpected == {"datacenter": dict.fromkeys(sorted(foreign), 1)}
    assert result.tier_states() == {"producer": "complete", "datacenter": "unexpected", "offline": "complete"}
    assert result.identity.holds and (result.identity.duplicates, result.identity.unexpected) == (0, 2)
    assert result.state == INCOMPLETE  # something is named
