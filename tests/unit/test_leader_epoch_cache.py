"""The leader epoch cache (leader-epoch-checkpoint) and the log's use of it: epochs assigned by
leader appends, rebuilt from batch headers for old logs, cut to the recovered log, moved by retention
(which also keeps the high watermark at or above the log start)."""

from __future__ import annotations

import os

from tests.unit.test_log_support import make_batch, open_log

from broker.log import LogConfig
from broker.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochFileCache


def test_checkpoint_file_uses_kafkas_format_and_survives_reload(tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    cache = LeaderEpochFileCache(path)
    assert cache.latest_epoch == -1 and cache.entries() == []
    cache.assign(0, 0)
    cache.assign(2, 10)
    assert path.read_text() == "0\n2\n0 0\n2 10\n"
    reloaded = LeaderEpochFileCache(path)
    assert reloaded.loaded and reloaded.entries() == [(0, 0), (2, 10)]
    assert reloaded.latest_epoch == 2


def test_assign_ignores_old_epochs_and_drops_contradicted_entries(tmp_path):
    cache = LeaderEpochFileCache(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    assert cache.assign(1, 0)
    assert cache.assign(3, 10)
    assert not cache.assign(3, 12)
    assert not cache.assign(2, 20)
    assert not cache.assign(-1, 30)
    assert cache.entries() == [(1, 0), (3, 10)]
    assert cache.assign(4, 10)
    assert cache.entries() == [(1, 0), (4, 10)]


def test_end_offset_for_follows_kafkas_rules(tmp_path):
    cache = LeaderEpochFileCache(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    assert cache.end_offset_for(0, 5) == (-1, -1)
    cache.assign(1, 0)
    cache.assign(3, 10)
    cache.assign(6, 25)
    assert cache.end_offset_for(6, 40) == (6, 40)
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(4, 40) == (3, 25)
    assert cache.end_offset_for(2, 40) == (1, 10)
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(0, 40) == (-1, -1)
    assert cache.end_offset_for(7, 40) == (-1, -1)
    assert cache.end_offset_for(-1, 40) == (-1, -1)


def test_truncate_from_end_and_from_start(tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    cache = LeaderEpochFileCache(path)
    for epoch, start in ((1, 0), (3, 10), (6, 25)):
        cache.assign(epoch, start)
    cache.truncate_from_end(25)
    assert cache.entries() == [(1, 0), (3, 10)]
    cache.truncate_from_start(12)
    assert cache.entries() == [(3, 12)]
    cache.truncate_from_start(5)
    assert cache.entries() == [(3, 12)]
    assert LeaderEpochFileCache(path).entries() == [(3, 12)]


def test_malformed_checkpoint_loads_as_missing(tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text("0\n2\n1 0\n")
    assert not LeaderEpochFileCache(path).loaded
    path.write_text("0\n2\n3 0\n1 5\n")
    assert not LeaderEpochFileCache(path).loaded


def test_leader_appends_assign_their_epoch_at_the_batch_start(tmp_path):
    log = open_log(tmp_path)
    try:
        log.append_as_leader(make_batch(3), leader_epoch=0)
        log.append_as_leader(make_batch(2), leader_epoch=0)
        log.assign_leader_epoch(2)
        log.append_as_leader(make_batch(1), leader_epoch=2)
        assert log.leader_epoch_cache.entries() == [(0, 0), (2, 5)]
        assert log.end_offset_for_epoch(0) == (0, 5)
        assert log.end_offset_for_epoch(1) == (0, 5)
        assert log.end_offset_for_epoch(2) == (2, 6)
        log.assign_leader_epoch(4)
        assert log.end_offset_for_epoch(2) == (2, 6)
        assert log.end_offset_for_epoch(4) == (4, 6)
    finally:
        log.close()


def test_missing_checkpoint_is_rebuilt_from_batch_headers(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for epoch in (-1, 1, 1, 3, 3, 5):
        log.append_as_leader(make_batch(2, 50), leader_epoch=epoch)
    expected = log.leader_epoch_cache.entries()
    assert expected == [(1, 2), (3, 6), (5, 10)]
    assert log.segment_count > 1
    log.close()
    (log.dir / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    reopened = open_log(tmp_path, LogConfig(segment_bytes=300))
    try:
        assert reopened.leader_epoch_cache.entries() == expected
        assert (reopened.dir / LEADER_EPOCH_CHECKPOINT_FILE).exists()
    finally:
        reopened.close()


def test_recovery_cuts_epochs_past_the_recovered_log_end(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(make_batch(2), leader_epoch=1)
    log.append_as_leader(make_batch(2), leader_epoch=2)
    segment = log.dir / f"{0:020d}.log"
    log.close()
    # A crash tore the last batch: recovery cuts it, and the epoch that started there goes too.
    os.truncate(segment, os.path.getsize(segment) - 5)
    reopened = open_log(tmp_path)
    try:
        assert reopened.log_end_offset == 2
        assert reopened.leader_epoch_cache.entries() == [(1, 0)]
    finally:
        reopened.close()


def test_retention_moves_the_first_epoch_and_the_high_watermark_to_the_log_start(tmp_path):
    batch = make_batch(2, 100)
    log = open_log(tmp_path, LogConfig(segment_bytes=len(batch) * 2, retention_bytes=len(batch) * 2, file_delete_delay_ms=0))
    try:
        for epoch in (1, 1, 1, 2, 2):
            log.append_as_leader(batch, leader_epoch=epoch)
        assert log.high_watermark == 0
        assert log.delete_retained_segments() > 0
        assert log.log_start_offset == 8 and log.high_watermark == 8
        assert log.leader_epoch_cache.entries() == [(2, 8)]
    finally:
        log.close()


def test_an_empty_log_writes_no_checkpoint_and_an_epochless_one_is_scanned_once(tmp_path):
    log = open_log(tmp_path)
    path = log.dir / LEADER_EPOCH_CHECKPOINT_FILE
    assert not path.exists()
    log.append_as_leader(make_batch(2))
    log.close()
    assert not path.exists()
    reopened = open_log(tmp_path)
    reopened.close()
    assert path.read_text() == "0\n0\n"
