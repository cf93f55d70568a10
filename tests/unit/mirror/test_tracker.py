"""The mirror's offset tracker: commits never pass an unacknowledged record, gaps are reported, repeats skipped."""

from __future__ import annotations

import random

from mirror.tracker import Gap, OffsetTracker, Rewind, SourcePartition

P0 = SourcePartition("dc1", "events", 0)
P1 = SourcePartition("dc2", "events", 0)


def test_out_of_order_acknowledgements_do_not_move_the_commit_past_a_hole() -> None:
    tracker = OffsetTracker()
    tracker.start(P0, 10)
    for offset in range(10, 15):
        assert tracker.track(P0, offset) is None
    assert tracker.committable() == {P0: 10}
    tracker.acknowledged(P0, [11, 12, 14])
    assert tracker.committable() == {P0: 10}
    assert tracker.outstanding() == 2
    tracker.acknowledged(P0, [10])
    assert tracker.committable() == {P0: 13}
    tracker.acknowledged(P0, [13])
    assert tracker.committable() == {P0: 15}
    assert tracker.outstanding() == 0


def test_sources_are_kept_apart_and_a_partition_without_a_start_starts_at_its_first_record() -> None:
    tracker = OffsetTracker()
    tracker.start(P0, None)
    assert tracker.committable() == {}
    assert tracker.track(P0, 7) is None
    assert tracker.track(P1, 3) is None
    tracker.acknowledged(P1, [3])
    assert tracker.committable("dc1") == {P0: 7}
    assert tracker.committable("dc2") == {P1: 4}
    assert tracker.committable(only=[P1, SourcePartition("dc3", "x", 1)]) == {P1: 4}


def test_a_gap_is_reported_and_tracked_past_only_when_allowed() -> None:
    tracker = OffsetTracker()
    tracker.start(P0, 100)
    gap = tracker.track(P0, 130)
    assert gap == Gap(P0, 100, 130) and gap.lost == 30
    assert tracker.committable() == {P0: 100}
    assert tracker.track(P0, 130, allow_gap=True) == Gap(P0, 100, 130)
    tracker.acknowledged(P0, [130])
    assert tracker.committable() == {P0: 131}


def test_a_partition_going_back_is_reported_and_a_forgotten_one_ignores_late_acknowledgements() -> None:
    tracker = OffsetTracker()
    tracker.start(P0, 5)
    assert tracker.track(P0, 5) is None
    assert tracker.track(P0, 2) == Rewind(P0, 6, 2)
    assert tracker.committable() == {P0: 5}
    tracker.forget(P0)
    tracker.acknowledged(P0, [5])
    assert tracker.committable() == {}
    tracker.start(P0, 5)
    assert tracker.committable() == {P0: 5}


def test_acknowledgements_of_offsets_not_outstanding_are_ignored() -> None:
    tracker = OffsetTracker()
    tracker.start(P0, 50)
    tracker.acknowledged(P0, [10, 50])
    assert tracker.track(P0, 50) is None and tracker.track(P0, 51) is None
    assert tracker.committable() == {P0: 50} and tracker.outstanding() == 2
    tracker.acknowledged(P0, [49, 51, 52])
    assert tracker.committable() == {P0: 50} and tracker.outstanding() == 1
    tracker.acknowledged(P0, [50])
    assert tracker.committable() == {P0: 52} and tracker.outstanding() == 0


def test_a_run_tracked_in_one_step_is_tracked_as_its_records_one_by_one() -> None:
    rng = random.Random(7)
    for _ in range(200):
        one_by_one, by_runs = OffsetTracker(), OffsetTracker()
        start = rng.choice([None, 0, 50])
        one_by_one.start(P0, start)
        by_runs.start(P0, start)
        offset = 50 if start is None else start
        for _ in range(rng.randint(1, 6)):
            count = rng.randint(1, 20)
            offset += rng.choice([0, 0, 0, 3, -2])  # in turn, past a gap, back
            outcomes = [one_by_one.track(P0, o) for o in range(offset, offset + count)]
            in_turn = all(outcome is None for outcome in outcomes)
            assert by_runs.track_run(P0, offset, count) is (outcomes[0] is None)
            if not in_turn:
                break
            offset += count
            done = rng.sample(range(offset - count, offset), rng.randint(0, count))
            one_by_one.acknowledged(P0, done)
            by_runs.acknowledged(P0, done)
            assert by_runs.committable() == one_by_one.committable()
            assert by_runs.outstanding() == one_by_one.outstanding()


def test_a_run_not_in_turn_is_not_tracked() -> None:
    tracker = OffsetTracker()
    tracker.start(P0, 10)
    assert tracker.track_run(P0, 10, 5)
    assert not tracker.track_run(P0, 17, 3)
    assert not tracker.track_run(P0, 12, 3)
    assert tracker.committable() == {P0: 10} and tracker.outstanding() == 5
    assert tracker.track(P0, 17, allow_gap=True) == Gap(P0, 15, 17)
    tracker.acknowledged(P0, [10, 11, 12, 13, 14, 17, 99, 3])
    assert tracker.committable() == {P0: 18} and tracker.outstanding() == 0
    tracker.acknowledged(P0, [])
