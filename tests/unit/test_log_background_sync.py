"""A log with an executor syncs off the caller's thread: group commit, and the recovery point moves only
after the fsync that covers it; a deleted log's directory is removed there too."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.unit.test_log_support import make_batch, open_log

from broker.log import LogConfig
from tests.support.polling import wait_until


def fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return ""


@pytest.fixture
def held_fsyncs(monkeypatch):
    """os.fsync that blocks until ``release`` is set; ``started`` lists the paths of the calls that began."""
    real_fsync = os.fsync
    release = threading.Event()
    started = []

    def fsync(fd: int) -> None:
        started.append(fd_path(fd))
        assert release.wait(10), "fsync never released"
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield release, started
    release.set()


@pytest.fixture
def log_with_pool(tmp_path, held_fsyncs):
    """A log with flush interval 1 on a thread pool, created and synced; fsyncs are held from now on."""
    release, started = held_fsyncs
    release.set()
    with ThreadPoolExecutor(2) as pool:
        log = open_log(tmp_path, LogConfig(flush_interval_messages=1), executor=pool)
        log.sync().result(10)
        release.clear()
        started.clear()
        try:
            yield log, release, started
        finally:
            release.set()
            log.close()


def test_recovery_point_moves_only_after_the_covering_fsync(log_with_pool):
    log, release, started = log_with_pool
    info = log.append_as_leader(make_batch(3))
    assert info.sync is not None
    wait_until(lambda: started, message="the append's fsync to start")
    assert not info.sync.done() and log.recovery_point == 0
    release.set()
    info.sync.result(10)
    assert log.recovery_point == 3


def test_appends_during_an_fsync_share_the_next_one(log_with_pool):
    log, release, started = log_with_pool
    first = log.append_as_leader(make_batch(1)).sync
    wait_until(lambda: started, message="the first append's fsync to start")
    rest = [log.append_as_leader(make_batch(1)).sync for _ in range(5)]
    release.set()
    for future in [first, *rest]:
        future.result(10)
    assert log.recovery_point == 6
    log_syncs = [path for path in started if path.endswith(".log")]
    assert len(log_syncs) == 2, "one fsync for the first append, one shared by the five during it"


def test_without_an_executor_the_append_syncs_inline(tmp_path):
    log = open_log(tmp_path, LogConfig(flush_interval_messages=2))
    try:
        assert log.append_as_leader(make_batch(1)).sync is None
        assert log.recovery_point == 0
        assert log.append_as_leader(make_batch(1)).sync is None
        assert log.recovery_point == 2
    finally:
        log.close()


def test_delete_renames_the_directory_at_once_and_removes_it_on_the_executor(tmp_path):
    with ThreadPoolExecutor(1) as pool:
        log = open_log(tmp_path, LogConfig(), executor=pool)
        log.append_as_leader(make_batch(2))
        partition_dir = log.dir
        log.delete()
        assert not partition_dir.exists()
        wait_until(lambda: list(tmp_path.iterdir()) == [], message="the renamed directory to be removed")
