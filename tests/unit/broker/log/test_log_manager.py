"""LogManager: loading partitions across log dirs, checkpoints, clean shutdown, periodic duties."""

from __future__ import annotations

import os

import pytest
from tests.unit.broker.log.log_support import make_batch, read_all

from broker.log import LogConfig, LogManager
from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE


class Clock:
    """A settable millisecond clock for the logs."""

    def __init__(self, now: int = 10_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def dirs(tmp_path):
    return [tmp_path / "d1", tmp_path / "d2"]


def started(dirs, config=None, clock=None) -> LogManager:
    manager = LogManager(dirs, config or LogConfig(), **({"time_ms": clock} if clock else {}))
    manager.startup()
    return manager


def test_creates_logs_across_dirs_and_reloads_them(dirs):
    manager = started(dirs)
    for partition in range(4):
        log = manager.get_or_create_log("events", partition)
        log.append_as_leader(make_batch(partition + 1))
    manager.get_or_create_log("other-topic", 0).append_as_leader(make_batch(2))
    assert manager.get_or_create_log("events", 1) is manager.get_log("events", 1)
    assert manager.get_log("missing", 0) is None
    placed = {log.dir.parent for log in manager.all_logs().values()}
    assert placed == set(dirs)
    manager.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()

    reloaded = started(dirs)
    try:
        logs = reloaded.all_logs()
        assert set(logs) == {("events", p) for p in range(4)} | {("other-topic", 0)}
        for partition in range(4):
            log = logs[("events", partition)]
            assert log.log_end_offset == partition + 1
            assert read_all(log) == [(0, partition + 1)]
        assert logs[("other-topic", 0)].topic == "other-topic"
        for d in dirs:
            assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    finally:
        reloaded.shutdown()


def test_foreign_entries_in_a_log_dir_are_ignored(dirs):
    dirs[0].mkdir(parents=True)
    (dirs[0] / "meta.properties").write_text("broker.id=1\n")
    (dirs[0] / "__metadata").mkdir()
    (dirs[0] / "not-a-partition-x").mkdir()
    (dirs[0] / "topic-3.abc-delete").mkdir()
    (dirs[0] / "cleaner-offset-checkpoint").write_text("0\n0\n")
    manager = started(dirs)
    try:
        assert manager.all_logs() == {}
        manager.get_or_create_log("t", 0).append_as_leader(make_batch(1))
    finally:
        manager.shutdown()
    assert (dirs[0] / "meta.properties").read_text() == "broker.id=1\n"
    assert (dirs[0] / "__metadata").is_dir()


def test_recovery_point_checkpoint_format(dirs):
    manager = started(dirs[:1], LogConfig(flush_interval_messages=1))
    try:
        manager.get_or_create_log("a", 0).append_as_leader(make_batch(3))
        manager.get_or_create_log("b", 2).append_as_leader(make_batch(5))
        manager.checkpoint_recovery_points()
        text = (dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE).read_text()
        assert text == "0\n2\na 0 3\nb 2 5\n"
        assert OffsetCheckpointFile(dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE).read() == {("a", 0): 3, ("b", 2): 5}
    finally:
        manager.shutdown()


def test_unclean_shutdown_recovers_from_the_checkpointed_recovery_point(dirs):
    manager = started(dirs[:1])
    log = manager.get_or_create_log("t", 0)
    for _ in range(4):
        log.append_as_leader(make_batch(2, 100))
    log.flush()
    assert log.recovery_point == 8
    manager.checkpoint_recovery_points()
    log.append_as_leader(make_batch(2, 100))
    log_file = log.dir / f"{0:020d}.log"
    log.close()  # a crash: no shutdown, no marker
    data = bytearray(log_file.read_bytes())
    data[-3] ^= 0x55  # damage the unflushed last batch
    log_file.write_bytes(bytes(data))

    reloaded = started(dirs[:1])
    try:
        recovered = reloaded.get_log("t", 0)
        assert recovered.log_end_offset == 8
        assert read_all(recovered) == [(0, 2), (2, 2), (4, 2), (6, 2)]
    finally:
        reloaded.shutdown()


def test_clean_shutdown_marker_means_no_crc_scan(dirs):
    manager = started(dirs[:1])
    manager.get_or_create_log("t", 0).append_as_leader(make_batch(2, 100))
    manager.shutdown()
    log_file = dirs[0] / "t-0" / f"{0:020d}.log"
    data = bytearray(log_file.read_bytes())
    data[-3] ^= 0x55
    log_file.write_bytes(bytes(data))
    reloaded = started(dirs[:1])
    try:
        assert reloaded.get_log("t", 0).log_end_offset == 2
    finally:
        reloaded.shutdown()


def test_delete_log_removes_the_directory(dirs):
    manager = started(dirs[:1])
    try:
        log = manager.get_or_create_log("t", 0)
        log.append_as_leader(make_batch(1))
        manager.delete_log("t", 0)
        assert manager.get_log("t", 0) is None
        assert not (dirs[0] / "t-0").exists()
        manager.delete_log("t", 0)
        assert manager.get_or_create_log("t", 0).log_end_offset == 0
    finally:
        manager.shutdown()


def test_directories_of_deletions_cut_short_are_removed_at_startup(dirs):
    leftover = dirs[0] / "t-0.0123456789abcdef-delete"
    leftover.mkdir(parents=True)
    (leftover / f"{0:020d}.log").write_bytes(b"old")
    manager = started(dirs[:1])
    try:
        assert not leftover.exists()
        assert manager.all_logs() == {}
    finally:
        manager.shutdown()


def test_run_retention_and_per_topic_config(dirs):
    clock = Clock()
    manager = started(dirs[:1], LogConfig(retention_ms=60_000, file_delete_delay_ms=0), clock)
    try:
        short = manager.get_or_create_log("short", 0, LogConfig(retention_ms=1_000, file_delete_delay_ms=0))
        long = manager.get_or_create_log("long", 0)
        for log in (short, long):
            log.append_as_leader(make_batch(1, timestamp=clock.now))
            log.roll()
            log.append_as_leader(make_batch(1, timestamp=clock.now))
        clock.now += 1_001
        assert manager.run_retention() == 1
        assert (short.log_start_offset, long.log_start_offset) == (1, 0)
        clock.now += 60_000
        assert manager.run_retention() == 1
        assert long.log_start_offset == 1
    finally:
        manager.shutdown()


def test_flush_dirty_logs(dirs):
    clock = Clock()
    manager = started(dirs[:1], LogConfig(flush_interval_ms=5_000), clock)
    try:
        log = manager.get_or_create_log("t", 0)
        log.append_as_leader(make_batch(3))
        manager.flush_dirty_logs()
        assert log.recovery_point == 0
        clock.now += 5_000
        manager.flush_dirty_logs()
        assert log.recovery_point == 3
        # A rolled segment is flushed at the next call even before the interval.
        log.append_as_leader(make_batch(2))
        log.roll()
        log.append_as_leader(make_batch(2))
        manager.flush_dirty_logs()
        assert log.recovery_point == 5
    finally:
        manager.shutdown()


def test_flush_interval_messages_moves_the_recovery_point(dirs):
    manager = started(dirs[:1], LogConfig(flush_interval_messages=5))
    try:
        log = manager.get_or_create_log("t", 0)
        log.append_as_leader(make_batch(3))
        assert log.recovery_point == 0
        log.append_as_leader(make_batch(3))
        assert log.recovery_point == 6
        log.append_as_leader(make_batch(4))
        assert log.recovery_point == 6
        log.append_as_leader(make_batch(1))
        assert log.recovery_point == 11
    finally:
        manager.shutdown()


def test_shutdown_checkpoints_log_end_offsets(dirs):
    manager = started(dirs)
    manager.get_or_create_log("t", 0).append_as_leader(make_batch(4))
    manager.get_or_create_log("t", 1).append_as_leader(make_batch(7))
    manager.shutdown()
    points = {}
    for d in dirs:
        points.update(OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT_FILE).read())
    assert points == {("t", 0): 4, ("t", 1): 7}
    assert not any(name.endswith(".tmp") for d in dirs for name in os.listdir(d))


def test_invalid_names_rejected(dirs):
    manager = started(dirs[:1])
    try:
        with pytest.raises(ValueError):
            manager.get_or_create_log("../escape", 0)
        with pytest.raises(ValueError):
            manager.get_or_create_log("t", -1)
    finally:
        manager.shutdown()


def test_truncation_checkpoints_the_lowered_recovery_point(dirs):
    manager = started(dirs[:1])
    try:
        log = manager.get_or_create_log("events", 0)
        for _ in range(4):
            log.append_as_leader(make_batch(5))
        log.flush()
        manager.checkpoint_recovery_points()
        checkpoint = OffsetCheckpointFile(dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE)
        assert checkpoint.read() == {("events", 0): 20}
        log.truncate_to(10)
        assert checkpoint.read() == {("events", 0): 10}
    finally:
        manager.shutdown()


def test_high_watermarks_are_checkpointed_and_loaded_clamped_to_the_log(dirs):
    manager = started(dirs[:1])
    log = manager.get_or_create_log("events", 0)
    other = manager.get_or_create_log("events", 1)
    for _ in range(4):
        log.append_as_leader(make_batch(5))
    other.append_as_leader(make_batch(5))
    log.update_high_watermark(15)
    other.update_high_watermark(5)
    manager.checkpoint_high_watermarks()
    checkpoint = OffsetCheckpointFile(dirs[0] / REPLICATION_OFFSET_CHECKPOINT_FILE)
    assert checkpoint.read() == {("events", 0): 15, ("events", 1): 5}
    log.update_high_watermark(20)
    manager.shutdown()
    assert checkpoint.read() == {("events", 0): 20, ("events", 1): 5}

    checkpoint.write({("events", 0): 10, ("events", 1): 1000})
    reloaded = started(dirs[:1])
    try:
        assert reloaded.get_log("events", 0).high_watermark == 10
        assert reloaded.get_log("events", 1).high_watermark == 5
    finally:
        reloaded.shutdown()
    (dirs[0] / REPLICATION_OFFSET_CHECKPOINT_FILE).write_text("garbage")
    reloaded = started(dirs[:1])
    try:
        assert reloaded.get_log("events", 0).high_watermark == 0
    finally:
        reloaded.shutdown()


def test_a_checkpoint_is_rewritten_only_when_its_offsets_change_or_it_is_gone(dirs):
    manager = started(dirs[:1])
    try:
        log = manager.get_or_create_log("t", 0)
        path = dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE
        manager.checkpoint_recovery_points()
        written = path.stat().st_ino
        manager.checkpoint_recovery_points()
        assert path.stat().st_ino == written  # unchanged: not replaced
        log.append_as_leader(make_batch(3))
        log.flush()
        manager.checkpoint_recovery_points()
        assert path.stat().st_ino != written and OffsetCheckpointFile(path).read() == {("t", 0): 3}
        path.unlink()
        manager.checkpoint_recovery_points()
        assert OffsetCheckpointFile(path).read() == {("t", 0): 3}
    finally:
        manager.shutdown()
