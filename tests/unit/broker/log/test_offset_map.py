"""SkimpyOffsetMap: key digest -> last offset in a fixed buffer."""

from __future__ import annotations

import os

import pytest

from broker.log.offset_map import OffsetMapFullError, SkimpyOffsetMap


def test_the_last_put_of_a_key_wins_and_unknown_keys_are_missing():
    offsets = SkimpyOffsetMap(24 * 1000)
    for i in range(500):
        offsets.put(b"key-%d" % (i % 100), i)
    assert len(offsets) == 100
    assert [offsets.get(b"key-%d" % k) for k in range(100)] == list(range(400, 500))
    assert offsets.get(b"other") == -1
    assert offsets.latest_offset == 499
    assert offsets.utilization == pytest.approx(0.1)


def test_memory_is_the_preallocated_buffer_whatever_the_keys():
    offsets = SkimpyOffsetMap(24 * 64 + 10)
    assert offsets.slots == 64 and offsets.memory == 24 * 64
    before = len(offsets._buf)
    for i in range(60):
        offsets.put(b"k" * 1000 + b"%d" % i, i)
    assert len(offsets._buf) == before
    assert all(offsets.get(b"k" * 1000 + b"%d" % i) == i for i in range(60))


def test_colliding_slots_are_probed_and_a_full_map_refuses_new_keys():
    offsets = SkimpyOffsetMap(24 * 4)
    for i in range(4):
        offsets.put(b"%d" % i, 10 + i)
    assert [offsets.get(b"%d" % i) for i in range(4)] == [10, 11, 12, 13]
    offsets.put(b"2", 20)
    assert offsets.get(b"2") == 20
    with pytest.raises(OffsetMapFullError):
        offsets.put(b"new", 30)


def test_clear_empties_the_map():
    offsets = SkimpyOffsetMap(24 * 10)
    offsets.put(b"a", 1)
    offsets.clear()
    assert len(offsets) == 0 and offsets.get(b"a") == -1 and offsets.latest_offset == -1
    offsets.put(b"b", 2)
    assert offsets.get(b"b") == 2 and len(offsets) == 1


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_the_buffer_is_resident_only_while_filled():
    before = resident_mib()
    offsets = SkimpyOffsetMap(64 << 20)
    assert resident_mib() - before < 8
    for i in range(200_000):
        offsets.put(b"%d" % i, i)
    assert resident_mib() - before > 32
    offsets.clear()
    assert resident_mib() - before < 8 and offsets.get(b"5") == -1


def test_a_buffer_too_small_for_one_entry_is_refused():
    with pytest.raises(ValueError):
        SkimpyOffsetMap(10)
