"""The log under concurrent use, and a failed write leaving no trace."""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest
from tests.unit.test_log_support import batches_in, make_batch, open_log, read_all

from broker.log import LogConfig, OffsetOutOfRangeError


def test_reads_and_retention_while_appending(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4000, retention_ms=None, retention_bytes=20_000, file_delete_delay_ms=0))
    errors: list[BaseException] = []
    appended = threading.Event()
    rounds = [0]

    def read_the_middle() -> None:
        start, end = log.log_start_offset, log.log_end_offset
        if end == 0:
            return
        offset = (start + end) // 2
        try:
            with log.read(offset, 2000) as fetched:
                found = batches_in(fetched.read_bytes())
        except OffsetOutOfRangeError:
            return  # retention moved the start meanwhile
        assert found and found[0][0] <= offset < found[0][0] + found[0][1]

    def reader() -> None:
        # The round that starts after the last append enforces retention on the whole log, so the size check
        # below does not depend on how often this thread was scheduled while the appends ran.
        try:
            while True:
                last_round = appended.is_set()
                read_the_middle()
                log.delete_retained_segments()
                rounds[0] += 1
                if last_round:
                    return
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        for _ in range(3000):
            log.append_as_leader(make_batch(2, 50))
            assert time.monotonic() < deadline
    finally:
        appended.set()
        thread.join(timeout=30)
    try:
        assert not thread.is_alive()
        assert errors == []
        assert rounds[0] >= 1
        assert log.log_end_offset == 6000
        assert log.size_in_bytes() < 30_000
        entries = read_all(log)
        assert entries[0][0] == log.log_start_offset and entries[-1] == (5998, 2)
    finally:
        log.close()


def test_failed_write_leaves_the_log_unchanged(tmp_path, monkeypatch):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=0))
    try:
        log.append_as_leader(make_batch(2))
        log.append_as_leader(make_batch(2))
        log_file = log.dir / f"{0:020d}.log"
        index_file = log.dir / f"{0:020d}.index"
        before = (log_file.stat().st_size, index_file.stat().st_size, log.log_end_offset)
        real_pwrite = os.pwrite

        def disk_full(fd, data, offset):
            real_pwrite(fd, bytes(data)[: len(data) // 2], offset)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", disk_full)
        with pytest.raises(OSError):
            log.append_as_leader(make_batch(3))
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        assert (log_file.stat().st_size, index_file.stat().st_size, log.log_end_offset) == before
        assert log.append_as_leader(make_batch(1)).first_offset == 4
        assert read_all(log) == [(0, 2), (2, 2), (4, 1)]
    finally:
        log.close()
