"""OffsetIndex and TimeIndex: on-disk entries, floor lookups, consistency checks."""

from __future__ import annotations

import os

import pytest

from broker.log import OffsetIndex, TimeIndex


@pytest.fixture
def offset_index(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1 << 20)
    yield index
    index.close()


@pytest.fixture
def time_index(tmp_path):
    index = TimeIndex(tmp_path / "00000000000000000100.timeindex", 100, 1 << 20)
    yield index
    index.close()


def test_offset_index_lookup_returns_floor_entry(offset_index):
    for i in range(1, 11):
        offset_index.append(100 + 10 * i, 1000 * i)
    assert offset_index.lookup(99) == (100, 0)
    assert offset_index.lookup(100) == (100, 0)
    assert offset_index.lookup(109) == (100, 0)
    assert offset_index.lookup(110) == (110, 1000)
    assert offset_index.lookup(155) == (150, 5000)
    assert offset_index.lookup(199) == (190, 9000)
    assert offset_index.lookup(200) == (200, 10000)
    assert offset_index.lookup(10**9) == (200, 10000)


def test_offset_index_entries_are_kafka_format_on_disk(offset_index):
    offset_index.append(105, 4096)
    offset_index.append(170, 9000)
    raw = offset_index.path.read_bytes()
    assert raw == (5).to_bytes(4, "big") + (4096).to_bytes(4, "big") + (70).to_bytes(4, "big") + (9000).to_bytes(4, "big")


def test_large_offset_index_search_matches_a_linear_scan(offset_index):
    # Enough entries that the search must narrow the range with single-entry reads first.
    entries = [(100 + 3 * i + 1, 4100 * (i + 1)) for i in range(5000)]
    for offset, position in entries:
        offset_index.append(offset, position)
    for target in list(range(95, 400)) + list(range(7000, 7400)) + list(range(14980, 15120)):
        expected = (100, 0)
        for offset, position in entries:
            if offset <= target:
                expected = (offset, position)
        assert offset_index.lookup(target) == expected, target


def test_reopened_offset_index_keeps_entries_and_last_entry(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1 << 20)
    for i in range(1, 101):
        index.append(i * 7, i * 5000)
    index.close()
    reopened = OffsetIndex(path, 0, 1 << 20)
    try:
        assert reopened.entries == 100
        assert reopened.last_offset == 700
        assert reopened.last_position == 500000
        assert reopened.lookup(353) == (350, 250000)
        assert reopened.is_consistent(log_size=500001)
        assert not reopened.is_consistent(log_size=500000)  # last entry points at the log's end
    finally:
        reopened.close()


def test_offset_index_inconsistencies_are_detected(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1 << 20)
    index.append(10, 5000)
    index.append(20, 9000)
    index.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00")  # torn entry
    torn = OffsetIndex(path, 0, 1 << 20)
    assert not torn.is_consistent(10**6)
    torn.close()
    path.write_bytes((30).to_bytes(4, "big") + (5000).to_bytes(4, "big") + (20).to_bytes(4, "big") + (9000).to_bytes(4, "big"))
    unordered = OffsetIndex(path, 0, 1 << 20)
    assert not unordered.is_consistent(10**6)
    unordered.close()


def test_index_is_full_at_max_size(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 24)
    try:
        for i in range(1, 3):
            index.append(i, i * 100)
        assert not index.is_full
        index.append(3, 300)
        assert index.is_full
    finally:
        index.close()


def test_time_index_appends_only_growing_timestamps(time_index):
    time_index.maybe_append(1000, 100)
    time_index.maybe_append(1000, 105)
    time_index.maybe_append(900, 110)
    time_index.maybe_append(2000, 120)
    assert time_index.entries == 2
    assert os.path.getsize(time_index.path) == 24
    assert time_index.last_timestamp == 2000
    assert time_index.last_offset == 120


def test_time_index_lookup(time_index):
    for i in range(1, 2001):
        time_index.maybe_append(i * 10, 100 + i * 3)
    assert time_index.lookup(5) == (-1, 100)
    assert time_index.lookup(10) == (10, 103)
    assert time_index.lookup(15) == (10, 103)
    assert time_index.lookup(12345) == (12340, 100 + 1234 * 3)
    assert time_index.lookup(10**12) == (20000, 6100)
    assert time_index.is_consistent(next_offset_bound=6101)
    assert not time_index.is_consistent(next_offset_bound=6100)


def test_reset_empties_the_file(offset_index):
    offset_index.append(150, 100)
    offset_index.reset()
    assert offset_index.entries == 0
    assert offset_index.lookup(1000) == (100, 0)
    assert os.path.getsize(offset_index.path) == 0
