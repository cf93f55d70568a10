"""The audit's IBLT sketch: exact decoding of small differences (losses and duplicates), a clear "incomplete"
beyond its size, linearity (hosts sum, tiers subtract) and its byte form."""

from __future__ import annotations

import random
import uuid

import pytest

from pipeline.auditing.sketch import DEFAULT_CELLS_PER_TABLE, EventSketch, SketchError, id_bytes


def ids(rng: random.Random, n: int) -> list[str]:
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


def sketch_of(events: list[str]) -> EventSketch:
    sketch = EventSketch()
    sketch.add(events)
    return sketch


@pytest.mark.parametrize("lost,duplicated", [(1, 0), (0, 1), (7, 5), (20, 10), (40, 20)])
def test_the_difference_of_two_tiers_names_the_lost_and_the_duplicated_events(lost, duplicated):
    rng = random.Random(lost * 100 + duplicated)
    events = ids(rng, 5000)
    gone = set(rng.sample(events, lost))
    twice = rng.sample([e for e in events if e not in gone], duplicated)
    later = [e for e in events if e not in gone] + twice
    rng.shuffle(later)
    difference = (sketch_of(later) - sketch_of(events)).decode()
    assert difference.complete
    assert difference.missing == {e: 1 for e in sorted(gone)}
    assert difference.extra == {e: 1 for e in sorted(twice)}


def test_equal_multisets_leave_nothing_and_order_does_not_matter():
    events = ids(random.Random(1), 3000)
    shuffled = list(events)
    random.Random(2).shuffle(shuffled)
    difference = sketch_of(shuffled) - sketch_of(events)
    assert difference.is_empty() and difference.decode().counts == {} and difference.decode().complete


def test_hosts_of_a_tier_sum_into_the_tier():
    events = ids(random.Random(3), 2000)
    whole = sketch_of(events)
    parts = sketch_of(events[:700]) + sketch_of(events[700:1500]) + sketch_of(events[1500:])
    assert (whole.cells == parts.cells).all()


def test_a_difference_too_large_is_reported_incomplete_and_what_it_names_is_true():
    rng = random.Random(4)
    events = ids(rng, 3000)
    gone = set(rng.sample(events, 500))
    difference = (sketch_of([e for e in events if e not in gone]) - sketch_of(events)).decode()
    assert not difference.complete
    assert set(difference.missing) <= gone and not difference.extra


def test_copies_beyond_one_and_removal_with_negative_copies():
    event = str(uuid.uuid4())
    sketch = EventSketch()
    sketch.add([event], copies=3)
    assert sketch.decode().counts == {event: 3}
    sketch.add([id_bytes(event)], copies=-3)
    assert sketch.is_empty()


def test_bytes_round_trip_and_bad_bytes():
    sketch = sketch_of(ids(random.Random(5), 100))
    data = sketch.to_bytes()
    assert len(data) == sketch.size_bytes
    assert (EventSketch.from_bytes(data).cells == sketch.cells).all()
    for bad in (b"", b"\x02" + data[1:], data[:-8]):
        with pytest.raises(SketchError):
            EventSketch.from_bytes(bad)
    with pytest.raises(SketchError, match="do not combine"):
        sketch - EventSketch(DEFAULT_CELLS_PER_TABLE + 1)
    with pytest.raises(SketchError, match="16 bytes"):
        sketch.add([b"short"])
