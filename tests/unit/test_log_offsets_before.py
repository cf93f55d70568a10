"""Log.offsets_before: the paper's getOffsetsBefore (ListOffsets v0), segment starts newest first."""

from __future__ import annotations

from tests.unit.test_log_support import make_batch, open_log

from broker.log import LogConfig


def build(tmp_path):
    # Three batches of 2 records, one per segment (tiny segments): timestamps 1000, 2000, 3000.
    log = open_log(tmp_path, LogConfig(segment_bytes=1), time_ms=lambda: 10_000)
    for ts in (1000, 2000, 3000):
        log.append_as_leader(make_batch(count=2, timestamp=ts))
    return log


def test_latest_earliest_and_by_time(tmp_path):
    log = build(tmp_path)
    assert log.segment_base_offsets() == [0, 2, 4]
    assert log.offsets_before(-1, 10) == [6, 4, 2, 0]
    assert log.offsets_before(-1, 2) == [6, 4]
    assert log.offsets_before(-2, 10) == [0]
    # Segments whose newest record is no newer than the time, newest first.
    assert log.offsets_before(2001, 10) == [2, 0]
    assert log.offsets_before(3001, 10) == [4, 2, 0]
    assert log.offsets_before(999, 10) == []
    # The active segment counts as written "now" (10 000 here).
    assert log.offsets_before(10_000, 1) == [6]
    assert log.offsets_before(-1, 0) == []
    log.close()


def test_after_retention_earliest_moves(tmp_path):
    log = build(tmp_path)
    log.config.retention_bytes = 1
    log.delete_retained_segments(now_ms=10_000)
    assert log.offsets_before(-2, 5) == [log.log_start_offset]
    assert log.offsets_before(-1, 5)[0] == 6
    log.close()
