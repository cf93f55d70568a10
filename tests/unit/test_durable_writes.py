"""Crash-safe small files and directories, checked by recording the fsync/rename sequence (a power cut
cannot be simulated): data fsynced before the rename, the directory fsynced after it; a new partition
directory is made durable in its parent; a producer snapshot written at roll is synced by the roll's flush."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.unit.test_log_support import make_batch, open_log

from broker.log import LogConfig
from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.partition_metadata import write_topic_id
from broker.metadata import BrokerEndpoint, StandaloneMetadata


@pytest.fixture
def disk_ops(monkeypatch):
    """The fsyncs (path synced) and renames (old -> new) done from now on, in order."""
    ops: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        ops.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst) -> None:
        ops.append(("rename", f"{src} -> {dst}"))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return ops


def assert_atomic_and_durable(ops: list[tuple[str, str]], path: Path) -> None:
    tmp = f"{path}.tmp"
    assert ops == [("fsync", tmp), ("rename", f"{tmp} -> {path}"), ("fsync", str(path.parent))]


def test_checkpoint_file(tmp_path, disk_ops):
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("t", 0): 5})
    assert_atomic_and_durable(disk_ops, path)


def test_partition_metadata_file(tmp_path, disk_ops):
    write_topic_id(tmp_path, "abc")
    assert_atomic_and_durable(disk_ops, tmp_path / "partition.metadata")


def test_standalone_metadata_file(tmp_path, disk_ops):
    store = StandaloneMetadata(tmp_path, BrokerEndpoint(0, "127.0.0.1", 9092))
    disk_ops.clear()
    store.create_topic("t", 1)
    assert_atomic_and_durable(disk_ops, tmp_path / "__standalone_metadata.json")


def test_producer_snapshot_at_close_is_durable(tmp_path, disk_ops):
    log = open_log(tmp_path, LogConfig())
    log.append_as_leader(make_batch(2))
    disk_ops.clear()
    log.close()
    assert_atomic_and_durable(disk_ops, log.dir / f"{2:020d}.snapshot")


def test_a_new_partition_directory_is_synced_in_its_parent(tmp_path, disk_ops):
    log = open_log(tmp_path, LogConfig())
    try:
        assert ("fsync", str(tmp_path)) in disk_ops
    finally:
        log.close()


def test_the_snapshot_written_at_roll_is_synced_with_its_directory_by_the_roll_flush(tmp_path, disk_ops):
    log = open_log(tmp_path, LogConfig())
    try:
        log.append_as_leader(make_batch(2))
        disk_ops.clear()
        log.roll()
        snapshot = str(log.dir / f"{2:020d}.snapshot")
        assert disk_ops == [("rename", f"{snapshot}.tmp -> {snapshot}")], "no fsync in the caller at roll"
        log.flush(2)
        synced = [path for op, path in disk_ops if op == "fsync"]
        assert snapshot in synced and str(log.dir) in synced
        assert synced.index(str(log.dir)) > synced.index(snapshot)
    finally:
        log.close()
