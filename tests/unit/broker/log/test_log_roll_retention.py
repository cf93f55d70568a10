"""Segment rolling (size, age, full index) and retention (time, size, delayed file deletion)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from tests.unit.broker.log.log_support import make_batch, open_log, read_all

from broker.log import LogConfig, OffsetOutOfRangeError
from pipeline.records import encode_batch


class Clock:
    """A settable millisecond clock for the log."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def segment_files(log) -> list[str]:
    return sorted(name for name in os.listdir(log.dir) if name.endswith(".log"))


def test_roll_by_size(tmp_path):
    batch = make_batch(2, 400)
    log = open_log(tmp_path, LogConfig(segment_bytes=len(batch) * 3 + 1))
    try:
        for _ in range(10):
            log.append_as_leader(batch)
        assert log.segment_base_offsets() == [0, 6, 12, 18]
        assert segment_files(log) == [f"{b:020d}.log" for b in (0, 6, 12, 18)]
        assert all(os.path.getsize(log.dir / name) <= len(batch) * 3 for name in segment_files(log))
        assert read_all(log) == [(i * 2, 2) for i in range(10)]
    finally:
        log.close()


def test_a_batch_larger_than_a_segment_gets_its_own_segment(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=500))
    try:
        log.append_as_leader(make_batch(1, 10))
        log.append_as_leader(make_batch(1, 2000))
        log.append_as_leader(make_batch(1, 10))
        assert log.segment_base_offsets() == [0, 1, 2]
    finally:
        log.close()


def test_roll_by_age_of_message_timestamps(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_ms=60_000))
    try:
        log.append_as_leader(make_batch(1, timestamp=1_000_000))
        log.append_as_leader(make_batch(1, timestamp=1_060_000))
        assert log.segment_count == 1
        log.append_as_leader(make_batch(1, timestamp=1_060_001))
        assert log.segment_base_offsets() == [0, 2]
    finally:
        log.close()


def test_roll_by_age_of_segment_when_batches_have_no_timestamp(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, LogConfig(segment_ms=60_000), time_ms=clock)
    try:
        log.append_as_leader(make_batch(1, timestamp=-1))
        clock.now += 60_000
        log.append_as_leader(make_batch(1, timestamp=-1))
        assert log.segment_count == 1
        clock.now += 1
        log.append_as_leader(make_batch(1, timestamp=-1))
        assert log.segment_base_offsets() == [0, 2]
    finally:
        log.close()


def test_roll_when_the_index_is_full(tmp_path):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=0, max_index_size=8 * 4))
    try:
        for _ in range(12):
            log.append_as_leader(make_batch(1))
        bases = log.segment_base_offsets()
        assert len(bases) >= 2
        for base in bases:
            assert os.path.getsize(log.dir / f"{base:020d}.index") <= 8 * 5
        assert read_all(log) == [(i, 1) for i in range(12)]
    finally:
        log.close()


def test_roll_of_an_empty_segment_is_a_no_op(tmp_path):
    log = open_log(tmp_path)
    try:
        log.roll()
        log.append_as_leader(make_batch(1))
        log.roll()
        log.roll()
        assert log.segment_base_offsets() == [0, 1]
    finally:
        log.close()


def fill_segments(log, count: int, timestamp_step: int = 1000) -> None:
    for i in range(count):
        log.append_as_leader(make_batch(5, 100, timestamp=100_000 + i * timestamp_step))
        log.roll()


def test_retention_by_time(tmp_path):
    log = open_log(tmp_path, LogConfig(retention_ms=10_000, file_delete_delay_ms=0))
    try:
        fill_segments(log, 5)  # segment i: offsets 5i..5i+4, largest timestamp 100_004 + 1000 i
        log.append_as_leader(make_batch(1, timestamp=1))
        assert log.delete_retained_segments(now_ms=111_004) == 1  # only segment 0 is > 10 s old
        assert log.log_start_offset == 5
        assert log.delete_retained_segments(now_ms=113_004) == 2
        assert log.log_start_offset == 15
        assert segment_files(log) == [f"{b:020d}.log" for b in (15, 20, 25)]
        with pytest.raises(OffsetOutOfRangeError):
            log.read(14, 1000)
        assert read_all(log)[0] == (15, 5)
        # The active segment (base 25) is never deleted, however old.
        assert log.delete_retained_segments(now_ms=10**12) == 2
        assert log.segment_base_offsets() == [25]
        assert log.log_start_offset == 25
    finally:
        log.close()


def test_retention_by_time_uses_mtime_when_batches_carry_no_timestamp(tmp_path):
    log = open_log(tmp_path, LogConfig(retention_ms=10_000, file_delete_delay_ms=0))
    try:
        log.append_as_leader(make_batch(1, timestamp=-1))
        log.roll()
        log.append_as_leader(make_batch(1, timestamp=-1))
        first = log.dir / f"{0:020d}.log"
        mtime_ms = os.stat(first).st_mtime_ns // 1_000_000
        assert log.delete_retained_segments(now_ms=mtime_ms + 10_000) == 0
        assert log.delete_retained_segments(now_ms=mtime_ms + 10_001) == 1
    finally:
        log.close()


def test_retention_by_size(tmp_path):
    log = open_log(tmp_path, LogConfig(retention_ms=None, file_delete_delay_ms=0))
    try:
        fill_segments(log, 6)
        log.append_as_leader(make_batch(5, 100))
        segment_size = os.path.getsize(log.dir / f"{0:020d}.log")
        total = log.size_in_bytes()
        assert total == 7 * segment_size
        log.config.retention_bytes = 4 * segment_size + 10
        # Deleting segment 0, 1 leaves 5 segments >= limit; deleting a third would go below.
        assert log.delete_retained_segments() == 2
        assert log.log_start_offset == 10
        assert log.size_in_bytes() == 5 * segment_size
        log.config.retention_bytes = 0
        assert log.delete_retained_segments() == 4  # everything but the active segment
        assert log.log_start_offset == 30
        with pytest.raises(OffsetOutOfRangeError):
            log.read(29, 100)
        assert log.append_as_leader(make_batch(1)).first_offset == 35
    finally:
        log.close()


def test_unlimited_retention(tmp_path):
    log = open_log(tmp_path, LogConfig(retention_ms=-1, retention_bytes=-1))
    try:
        fill_segments(log, 3)
        assert log.delete_retained_segments(now_ms=10**15) == 0
    finally:
        log.close()


def test_a_compact_only_log_keeps_its_segments_past_retention_and_compact_delete_does_not(tmp_path):
    compact = open_log(tmp_path / "compact", LogConfig(retention_ms=10_000, retention_bytes=0, file_delete_delay_ms=0,
                                                       cleanup_policy=frozenset({"compact"})))
    both = open_log(tmp_path / "both", LogConfig(retention_ms=10_000, file_delete_delay_ms=0,
                                                 cleanup_policy=frozenset({"compact", "delete"})))
    try:
        for log in (compact, both):
            for i in range(3):
                log.append_as_leader(encode_batch([b"v"] * 5, [b"k"] * 5, timestamp=100_000 + i * 1000))
                log.roll()
        assert compact.delete_retained_segments(now_ms=10**12) == 0
        assert compact.log_start_offset == 0
        assert both.delete_retained_segments(now_ms=10**12) == 3
    finally:
        compact.close()
        both.close()


def test_delayed_file_deletion(tmp_path):
    clock = Clock(200_000)
    log = open_log(tmp_path, LogConfig(retention_ms=10_000, file_delete_delay_ms=60_000), time_ms=clock)
    try:
        fill_segments(log, 3)
        assert log.delete_retained_segments() == 3
        leftovers = sorted(name for name in os.listdir(log.dir) if name.endswith(".deleted"))
        assert leftovers == sorted(
            f"{b:020d}{ext}.deleted" for b in (0, 5, 10) for ext in (".log", ".index", ".timeindex")
        )
        clock.now += 59_999
        log.delete_retained_segments()
        assert any(name.endswith(".deleted") for name in os.listdir(log.dir))
        clock.now += 1
        log.delete_retained_segments()
        assert not any(name.endswith(".deleted") for name in os.listdir(log.dir))
    finally:
        log.close()


def test_retention_survives_reopen(tmp_path):
    log = open_log(tmp_path, LogConfig(retention_ms=10_000, file_delete_delay_ms=60_000))
    fill_segments(log, 4)
    log.delete_retained_segments(now_ms=10**13)
    log.close()
    reopened = open_log(tmp_path, LogConfig())
    try:
        assert reopened.log_start_offset == 20
        assert reopened.log_end_offset == 20
        assert not any(name.endswith(".deleted") for name in os.listdir(reopened.dir))
    finally:
        reopened.close()


@pytest.mark.parametrize("delay_ms", [0, 60_000])
def test_retention_removes_files_without_holding_the_log_lock(tmp_path, monkeypatch, delay_ms):
    clock = Clock(200_000)
    log = open_log(tmp_path, LogConfig(retention_ms=10_000, file_delete_delay_ms=delay_ms), time_ms=clock)
    appended_during_unlink = []
    real_unlink = Path.unlink

    def unlink(path: Path, missing_ok: bool = False) -> None:
        if path.name.startswith(f"{0:020d}.log") and not appended_during_unlink:
            appender = threading.Thread(target=lambda: appended_during_unlink.append(log.append_as_leader(make_batch(1))))
            appender.start()
            appender.join(5)
            appended_during_unlink.append(not appender.is_alive())
        real_unlink(path, missing_ok=missing_ok)

    try:
        fill_segments(log, 3)
        monkeypatch.setattr(Path, "unlink", unlink)
        assert log.delete_retained_segments() == 3
        clock.now += delay_ms
        log.delete_retained_segments()
        assert appended_during_unlink[-1] is True, "an append waited for the removal of a segment file"
    finally:
        monkeypatch.undo()
        log.close()
