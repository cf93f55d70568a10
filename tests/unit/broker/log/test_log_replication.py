"""The replication side of the log: appends of the leader's batches, truncation of a divergent tail,
starting over at the leader's log start, how each survives a restart or a crash midway, and reads
bounded by the high watermark."""

from __future__ import annotations

import os
import random
import threading

import pytest
from tests.unit.broker.log.log_support import make_batch, open_log, read_all

import broker.log.log as log_module
from broker.log import CorruptRecordError, Log, LogConfig, OffsetOutOfRangeError
from broker.log.errors import UnexpectedAppendOffsetError
from broker.log.offset_index import OffsetIndex
from pipeline.records.batch import iter_batches


def log_bytes(log: Log, start: int | None = None) -> bytes:
    """Every byte of the log's batches from ``start`` (default: the log start), in offset order."""
    out = bytearray()
    position = log.log_start_offset if start is None else start
    while position < log.log_end_offset:
        with log.read(position, 1 << 20) as fetched:
            data = fetched.read_bytes()
        whole = list(iter_batches(data))
        assert whole
        end = whole[-1][0] + whole[-1][1].size
        out += data[:end]
        position = whole[-1][1].next_offset
    return bytes(out)


def leader_with(tmp_path, epochs=(1, 1, 2, 2, 3)) -> Log:
    leader = Log(tmp_path / "leader" / "topic-0", LogConfig())
    for epoch in epochs:
        leader.append_as_leader(make_batch(3, 40), leader_epoch=epoch)
    return leader


@pytest.fixture
def pair(tmp_path):
    """A leader log of five 3-record batches in epochs 1, 1, 2, 2, 3 and an empty follower log."""
    leader = leader_with(tmp_path)
    follower = open_log(tmp_path / "follower")
    yield leader, follower
    leader.close()
    follower.close()


def test_follower_append_keeps_the_leaders_offsets_epochs_and_bytes(pair):
    leader, follower = pair
    info = follower.append_as_follower(log_bytes(leader))
    assert (info.first_offset, info.last_offset, info.duplicate) == (0, 14, False)
    assert follower.log_end_offset == leader.log_end_offset == 15
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries() == [(1, 0), (2, 6), (3, 12)]
    assert follower.end_offset_for_epoch(2) == (2, 12)


def test_a_trailing_partial_batch_is_left_out(pair):
    leader, follower = pair
    data = log_bytes(leader)
    info = follower.append_as_follower(data[:-5])
    assert info.last_offset == 11 and follower.log_end_offset == 12
    assert follower.append_as_follower(data[len(log_bytes(follower)) : -5]) is None
    assert follower.append_as_follower(b"") is None
    follower.append_as_follower(log_bytes(leader, 12))
    assert log_bytes(follower) == data


def test_follower_append_must_not_start_below_the_log_end(pair):
    leader, follower = pair
    data = log_bytes(leader)
    follower.append_as_follower(data[: len(data) // 5 * 2])
    assert follower.log_end_offset == 6
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(log_bytes(leader))
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(log_bytes(leader, 3))
    assert follower.log_end_offset == 6


def test_follower_append_may_start_past_the_log_end(pair):
    """A compacted leader log has gaps: the batch after the follower's log end may start further on."""
    leader, follower = pair
    follower.append_as_follower(log_bytes(leader, 9))
    assert follower.log_end_offset == 15
    assert read_all(follower) == read_all(leader, 9)


def test_a_batch_failing_its_crc_appends_nothing(pair):
    leader, follower = pair
    data = bytearray(log_bytes(leader))
    second = list(iter_batches(data))[1][0]
    data[second + 70] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(data)
    assert follower.log_end_offset == 0 and read_all(follower) == []


def test_producer_retries_are_recognised_by_a_follower_that_became_leader(tmp_path):
    leader = Log(tmp_path / "leader" / "topic-0", LogConfig())
    follower = open_log(tmp_path / "follower")
    try:
        for seq in (0, 3, 6):
            leader.append_as_leader(make_batch(3, producer_id=7, producer_epoch=0, base_sequence=seq), leader_epoch=1)
        follower.append_as_follower(log_bytes(leader))
        retry = follower.append_as_leader(make_batch(3, producer_id=7, producer_epoch=0, base_sequence=6), leader_epoch=2)
        assert retry.duplicate and (retry.first_offset, retry.last_offset) == (6, 8)
        following = follower.append_as_leader(make_batch(3, producer_id=7, producer_epoch=0, base_sequence=9), leader_epoch=2)
        assert not following.duplicate and following.first_offset == 9
        assert follower.leader_epoch_cache.entries() == [(1, 0), (2, 9)]
    finally:
        leader.close()
        follower.close()


def test_follower_appends_roll_segments_and_follow_the_flush_policy(tmp_path):
    leader = leader_with(tmp_path, epochs=(1,) * 10)
    batch_size = len(log_bytes(leader)) // 10
    follower = open_log(tmp_path / "follower", LogConfig(segment_bytes=batch_size * 4, flush_interval_messages=6))
    try:
        data = log_bytes(leader)
        follower.append_as_follower(data[:batch_size])
        assert follower.recovery_point == 0
        follower.append_as_follower(data[batch_size : batch_size * 3])
        assert follower.recovery_point == 9
        follower.append_as_follower(data[batch_size * 3 :])
        assert follower.segment_base_offsets() == [0, 9]
        assert follower.recovery_point == 30
        assert log_bytes(follower) == data
    finally:
        leader.close()
        follower.close()


# Four 3-record batches of 100-byte values per segment, an index entry for each but the first.
DIVERGED_CONFIG = LogConfig(segment_bytes=1700, index_interval_bytes=300)


def diverged_log(tmp_path) -> Log:
    """A log over three segments (bases 0, 12, 24; a batch of 3 per epoch step) with an idempotent
    producer, epochs 1, 2, 3 and a high watermark at its end."""
    log = open_log(tmp_path, DIVERGED_CONFIG)
    seq = 0
    for epoch in (1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3):
        log.append_as_leader(make_batch(3, 100, producer_id=5, producer_epoch=0, base_sequence=seq), leader_epoch=epoch)
        seq += 3
    log.flush()
    log.update_high_watermark(log.log_end_offset)
    return log


def test_truncate_to_removes_the_tail_everywhere(tmp_path):
    log = diverged_log(tmp_path)
    try:
        bases = log.segment_base_offsets()
        assert len(bases) >= 3
        before = read_all(log)
        assert not log.truncate_to(log.log_end_offset)
        assert log.truncate_to(15)
        assert log.log_end_offset == 15
        assert read_all(log) == [b for b in before if b[0] < 15]
        assert log.segment_base_offsets() == [b for b in bases if b < 15]
        assert sorted(p for p in os.listdir(log.dir) if p.endswith(".log")) == [f"{b:020d}.log" for b in bases if b < 15]
        assert log.leader_epoch_cache.entries() == [(1, 0), (2, 12)]
        assert log.recovery_point == 15 and log.high_watermark == 15
        with pytest.raises(OffsetOutOfRangeError):
            log.read(16, 100)
        # The producer's truncated batches are forgotten: its sequence 15 is new, not a duplicate.
        again = log.append_as_leader(make_batch(3, 100, producer_id=5, producer_epoch=0, base_sequence=15), leader_epoch=4)
        assert not again.duplicate and again.first_offset == 15
        assert log.end_offset_for_epoch(2) == (2, 15)
        assert log.offset_for_timestamp(0) == (0, 1_000_000)
    finally:
        log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_truncated_log_reloads_with_the_same_end_and_contents(tmp_path, clean):
    log = diverged_log(tmp_path)
    log.truncate_to(21)
    log.append_as_leader(make_batch(2, 100), leader_epoch=5)
    expected = (log.log_end_offset, log_bytes(log), log.leader_epoch_cache.entries())
    if clean:
        log.flush()
    log.close()
    reopened = open_log(tmp_path, DIVERGED_CONFIG, recovery_point=log.recovery_point, last_shutdown_clean=clean)
    try:
        assert (reopened.log_end_offset, log_bytes(reopened), reopened.leader_epoch_cache.entries()) == expected
        assert reopened.log_end_offset == 21 + 2
    finally:
        reopened.close()


def test_a_crash_before_the_index_is_cut_cannot_resurrect_the_tail(tmp_path, monkeypatch):
    log = diverged_log(tmp_path)
    old_end = log.log_end_offset
    expected = [b for b in read_all(log) if b[0] < 15]

    def crash(self, offset):
        raise OSError("simulated crash")

    monkeypatch.setattr(OffsetIndex, "truncate_to", crash)
    with pytest.raises(OSError):
        log.truncate_to(15)
    monkeypatch.undo()
    # The checkpointed recovery point still says everything up to the old end was flushed.
    reopened = open_log(tmp_path, DIVERGED_CONFIG, recovery_point=old_end)
    try:
        assert reopened.log_end_offset == 15
        assert read_all(reopened) == expected
        assert reopened.leader_epoch_cache.entries() == [(1, 0), (2, 12)]
    finally:
        reopened.close()
        log.close()


def test_truncate_fully_and_start_at(tmp_path):
    log = diverged_log(tmp_path)
    leader = leader_with(tmp_path, epochs=(7,) * 60)
    try:
        log.truncate_fully_and_start_at(150)
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) == (150, 150, 150, 150)
        assert log.segment_base_offsets() == [150]
        assert sorted(p for p in os.listdir(log.dir) if p.endswith((".log", ".snapshot"))) == [f"{150:020d}.log"]
        assert log.leader_epoch_cache.entries() == []
        log.append_as_follower(log_bytes(leader, 150))
        assert log.log_end_offset == 180 and log.leader_epoch_cache.entries() == [(7, 150)]
        log.close()
        reopened = open_log(tmp_path, DIVERGED_CONFIG)
        assert (reopened.log_start_offset, reopened.log_end_offset) == (150, 180)
        assert log_bytes(reopened) == log_bytes(leader, 150)
        reopened.close()
    finally:
        log.close()
        leader.close()


def test_truncate_below_the_log_start_starts_over_there(tmp_path):
    log = diverged_log(tmp_path)
    try:
        log.maybe_increment_log_start_offset(20)
        assert log.truncate_to(10)
        assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets()) == (10, 10, [10])
    finally:
        log.close()


def test_maybe_increment_log_start_offset(tmp_path):
    log = diverged_log(tmp_path)
    try:
        log.update_high_watermark(0)
        bases = log.segment_base_offsets()
        target = bases[1] + 4
        assert log.maybe_increment_log_start_offset(target)
        assert not log.maybe_increment_log_start_offset(target - 1)
        assert log.log_start_offset == target
        assert log.segment_base_offsets() == bases[1:]
        assert log.high_watermark == target
        assert log.leader_epoch_cache.entries()[0].start_offset == target
        with pytest.raises(OffsetOutOfRangeError):
            log.read(target - 1, 100)
        with log.read(target, 100) as fetched:
            assert fetched.size > 0
        assert log.maybe_increment_log_start_offset(10_000)
        assert log.log_start_offset == log.log_end_offset
    finally:
        log.close()


def test_update_high_watermark_clamps_to_the_log(tmp_path):
    log = diverged_log(tmp_path)
    try:
        assert log.update_high_watermark(10) == 10
        assert log.update_high_watermark(10_000) == log.log_end_offset
        log.maybe_increment_log_start_offset(12)
        assert log.update_high_watermark(3) == 12
    finally:
        log.close()


def test_a_flush_running_across_a_truncation_does_not_move_the_recovery_point_past_it(tmp_path, monkeypatch):
    log = diverged_log(tmp_path)
    log.append_as_leader(make_batch(3, 100), leader_epoch=3)
    syncing = threading.Event()
    release = threading.Event()
    real_fsync_and_close = log_module.fsync_and_close

    def slow_fsync_and_close(fds):
        syncing.set()
        release.wait(10)
        real_fsync_and_close(fds)

    monkeypatch.setattr(log_module, "fsync_and_close", slow_fsync_and_close)
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    try:
        assert syncing.wait(10)
        log.truncate_to(15)
        for _ in range(10):
            log.append_as_leader(make_batch(3, 100), leader_epoch=4)
    finally:
        release.set()
        flusher.join(10)
        log.close()
    # The flush synced data that the truncation removed, none of what was appended after it.
    assert log.recovery_point == 15


def bounded_batches(log: Log, offset: int, max_offset: int | None, max_bytes: int = 1 << 20) -> list[tuple[int, int]]:
    with log.read(offset, max_bytes, max_offset=max_offset) as fetched:
        return [(h.base_offset, h.record_count) for _, h in iter_batches(fetched.read_bytes())]


def test_read_stops_before_the_batch_at_max_offset(tmp_path):
    log = diverged_log(tmp_path)
    try:
        bases = log.segment_base_offsets()
        first_end = bases[1]
        assert bounded_batches(log, 0, 9) == [(0, 3), (3, 3), (6, 3)]
        assert bounded_batches(log, 4, 9) == [(3, 3), (6, 3)]
        assert bounded_batches(log, 0, None) == bounded_batches(log, 0, log.log_end_offset)
        assert bounded_batches(log, 0, 9, max_bytes=10) == [(0, 3)]
        # A bound in a later segment (or at its first batch) leaves this segment whole.
        whole_segment = [(b, 3) for b in range(0, first_end, 3)]
        assert bounded_batches(log, 0, first_end) == whole_segment
        assert bounded_batches(log, 0, log.log_end_offset - 3) == whole_segment
        # A bound inside a batch (never a high watermark) excludes that batch.
        assert bounded_batches(log, 0, 10) == [(0, 3), (3, 3), (6, 3)]
        assert bounded_batches(log, 9, 10) == []
        for offset in (9, 12, log.log_end_offset):
            assert bounded_batches(log, offset, 9) == []
        for offset in (-1, log.log_end_offset + 1):
            with pytest.raises(OffsetOutOfRangeError):
                log.read(offset, 100, max_offset=9)
    finally:
        log.close()


def test_every_bounded_read_is_a_prefix_of_the_unbounded_one_below_the_bound(tmp_path):
    log = diverged_log(tmp_path)
    try:
        end = log.log_end_offset
        for high_watermark in range(0, end + 1, 3):
            for offset in range(0, end + 1):
                expected = [b for b in bounded_batches(log, offset, None) if b[0] < high_watermark]
                assert bounded_batches(log, offset, high_watermark) == expected, (offset, high_watermark)
    finally:
        log.close()


@pytest.mark.parametrize("seed", range(6))
def test_random_appends_truncations_and_restarts_keep_log_and_epochs_consistent(tmp_path, seed):
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=1200, index_interval_bytes=250)
    log = open_log(tmp_path, config)
    model: list[tuple[int, int, int]] = []  # (base offset, record count, epoch) of every batch
    epoch = 0
    try:
        for _ in range(60):
            action = rng.random()
            end = model[-1][0] + model[-1][1] if model else 0
            if action < 0.6:
                if rng.random() < 0.2:
                    epoch += 1
                count = rng.randint(1, 4)
                log.append_as_leader(make_batch(count, rng.randint(10, 200)), leader_epoch=epoch)
                model.append((end, count, epoch))
            elif action < 0.8 and model:
                cut = rng.randrange(len(model))
                log.truncate_to(model[cut][0])
                del model[cut:]
            else:
                # Unclean: no flush, and the load recovers from the recovery point.
                clean = rng.random() < 0.5
                if clean:
                    log.flush()
                log.close()
                log = open_log(tmp_path, config, recovery_point=log.recovery_point, last_shutdown_clean=clean)
            assert read_all(log) == [(base, count) for base, count, _ in model]
            expected_epochs = []
            for base, _, batch_epoch in model:
                if not expected_epochs or batch_epoch > expected_epochs[-1][0]:
                    expected_epochs.append((batch_epoch, base))
            assert log.leader_epoch_cache.entries() == expected_epochs
    finally:
        log.close()
