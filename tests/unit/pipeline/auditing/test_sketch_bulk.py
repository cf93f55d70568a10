"""EventSketch.add in bulk (ids kept and hashed many at a time, text ids read in one pass) against a reference
that adds each id on its own, cell by cell, from the sketch's hashes: the same cells for any ids, copies, batch
sizes and reads in between; malformed ids refused as one by one."""

from __future__ import annotations

import random
import struct
import uuid

import numpy as np
import pytest

from pipeline.auditing.sketch import HASHES, EventSketch, SketchError, _digest, id_bytes


def reference(adds: list[tuple[list[bytes | str], int]], per_table: int = 30) -> np.ndarray:
    """The cells of the adds done one id at a time in Python integers (modulo 2^64 for the check column)."""
    cells = [[0] * 6 for _ in range(HASHES * per_table)]
    for ids, copies in adds:
        for event in ids:
            key = event if isinstance(event, bytes) else id_bytes(event)
            h = _digest(key)
            lanes = struct.unpack("<4I", key)
            for j in range(HASHES):
                cell = cells[j * per_table + h[1 + j] % per_table]
                cell[0] += copies
                for lane in range(4):
                    cell[1 + lane] += lanes[lane] * copies
                cell[5] = (cell[5] + h[0] * copies + (1 << 63)) % (1 << 64) - (1 << 63)
    return np.array(cells, dtype=np.int64)


def random_ids(rng: random.Random, n: int) -> list[bytes | str]:
    out: list[bytes | str] = []
    for _ in range(n):
        event = uuid.UUID(int=rng.getrandbits(128))
        out.append(rng.choice([str(event), event.bytes, str(event).upper(), event.hex]))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_many_adds_of_any_size_and_copies_equal_the_reference(seed):
    rng = random.Random(seed)
    per_table = rng.choice([1, 7, 30, 64])
    sketch = EventSketch(per_table)
    adds = []
    for _ in range(rng.randint(1, 40)):
        batch = random_ids(rng, rng.choice([0, 1, 2, 10, 100, 1500, 5000]))
        if rng.random() < 0.5:
            batch = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(len(batch))]
        copies = rng.choice([1, 1, 1, 2, -1, -3])
        sketch.add(batch if rng.random() < 0.8 else iter(batch), copies)
        adds.append((batch, copies))
        if rng.random() < 0.2:  # a read in between hashes what is pending
            assert np.array_equal(sketch.cells, reference(adds, per_table))
    assert np.array_equal(sketch.cells, reference(adds, per_table))
    assert np.array_equal(EventSketch.from_bytes(sketch.to_bytes()).cells, sketch.cells)


def test_pending_ids_are_in_every_view_of_the_sketch():
    events = [str(uuid.UUID(int=i)) for i in range(1, 6)]
    sketch = EventSketch()
    sketch.add(events)
    assert not sketch.is_empty()
    assert sorted(sketch.decode().counts) == sorted(events)
    other = EventSketch()
    other.add(events[:3])
    assert sorted((sketch - other).decode().counts) == sorted(events[3:])
    copy = EventSketch()
    copy.cells = sketch.cells.copy()
    assert copy.to_bytes() == sketch.to_bytes()


@pytest.mark.parametrize("bad,error", [
    ("0123456789abcdef0123456789abcdef0123", ValueError),     # 36 characters, no dashes: not hex-with-dashes
    ("01234567-89ab-cdef-0123-456789abcdeg", ValueError),     # not hex
    ("01234567-89ab-cdef-0123-456789abcd e", ValueError),     # whitespace, which fromhex would skip
    ("01234567-89ab-cdef-0123-456789abcd", SketchError),      # short
    ("01234567-89ab-cdef-0123-456789abcdef00", SketchError),  # long
    ("0123456-789ab-cdef-0123-456789abcdef", None),           # dashes elsewhere: read as before, one by one
    ("é1234567-89ab-cdef-0123-456789abcdef", ValueError),     # not ASCII
    (b"short", SketchError),
])
def test_malformed_ids_are_refused_as_one_by_one_and_leave_the_sketch_as_it_was(bad, error):
    good = [str(uuid.UUID(int=i)) for i in range(1, 4)]
    sketch = EventSketch()
    sketch.add(good)
    before = sketch.to_bytes()
    if error is None:
        sketch.add([*good, bad])
        assert np.array_equal(sketch.cells, reference([(good, 1), ([*good, bad], 1)]))
        return
    with pytest.raises(error):
        sketch.add([*good, bad])
    assert sketch.to_bytes() == before
