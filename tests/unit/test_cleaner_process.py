"""Passes in a real cleaner worker process: the channel's descriptors, a result the same as in-process
cleaning, an abort, and a worker that dies mid-pass."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading

import pytest
from tests.unit.cleaner_support import cleaner_for, compact_config, compacted, latest_per_key, read_records, ready_to_clean, write_updates

from broker.log import Log
from broker.log.cleaner import CleanerConfig
from broker.log.cleaner_channel import MAX_FDS_PER_SEND, Channel, ChannelClosedError
from broker.log.cleaner_process import CleanerProcess, CleanerWorkerError
from broker.log.log_cleaner_manager import LogCleanerManager, LogCleaningAbortedError
from tests.support.broker import child_pids
from tests.support.polling import wait_until

TP = ("compacted", 0)


def updates(keys: int, rounds: int) -> list[tuple[bytes, bytes]]:
    return [(b"key-%02d" % (i % keys), b"value-%06d" % i) for i in range(keys * rounds)]


@pytest.fixture
def log(tmp_path):
    log = Log(tmp_path / "compacted-0", compact_config())
    yield log
    log.close()


@pytest.fixture
def manager(log):
    return LogCleanerManager([log.dir.parent], lambda: {TP: log})


@pytest.fixture
def worker(manager):
    worker = CleanerProcess(CleanerConfig(dedupe_buffer_size=1 << 20), manager)
    yield worker
    worker.close()


def leftovers(log: Log) -> list[str]:
    return sorted(name for name in os.listdir(log.dir) if name.endswith((".cleaned", ".swap")))


def test_the_channel_carries_more_descriptors_than_one_message_may(tmp_path):
    files = []
    for i in range(2 * MAX_FDS_PER_SEND + 3):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"%d" % i)
        files.append(os.open(path, os.O_RDONLY))
    ours, theirs = socket.socketpair()
    sender, receiver = Channel(ours), Channel(theirs)
    try:
        sender.send(("job", list(range(len(files)))), files)
        message, fds = receiver.receive()
        assert message == ("job", list(range(len(files))))
        assert [os.pread(fd, 8, 0) for fd in fds] == [b"%d" % i for i in range(len(files))]
        for fd in fds:
            os.close(fd)
        sender.close()
        assert receiver.ready(1.0)
        with pytest.raises(ChannelClosedError):
            receiver.receive()
    finally:
        for fd in files:
            os.close(fd)
        receiver.close()


def test_a_pass_in_the_worker_leaves_what_an_in_process_pass_leaves(log, manager, worker, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the worker finds the broker package from any working directory
    written = write_updates(log, updates(keys=5, rounds=60))
    ready_to_clean(log)
    size_before = log.size_in_bytes()
    to_clean = manager.grab_filthiest_compacted_log(0)
    try:
        end, stats = worker.clean(to_clean)
    finally:
        manager.done_cleaning(TP)
    assert end == log.active_segment_base()
    assert read_records(log) == compacted(written)
    assert stats.messages_read == len(written) and stats.messages_written == 5
    assert log.size_in_bytes() < size_before / 10 and leftovers(log) == []
    assert worker.pid is not None and worker.pid != os.getpid()


def test_an_abort_stops_the_workers_pass_and_leaves_the_log_as_it_was(log, manager):
    # 20 KB/s: the pass over some 60 KB takes seconds, so the abort comes in its middle.
    worker = CleanerProcess(CleanerConfig(dedupe_buffer_size=1 << 20, max_io_bytes_per_second=20_000), manager)
    try:
        write_updates(log, updates(keys=5, rounds=400))
        ready_to_clean(log)
        before = read_records(log)
        to_clean = manager.grab_filthiest_compacted_log(0)
        outcome: list[BaseException] = []

        def clean() -> None:
            try:
                worker.clean(to_clean)
            except BaseException as exc:
                outcome.append(exc)
            finally:
                manager.done_cleaning(TP)

        thread = threading.Thread(target=clean)
        thread.start()
        wait_until(lambda: worker.pid is not None, message="the worker to start")
        manager.abort_and_pause(TP)  # returns once the pass has stopped
        thread.join(10)
        assert not thread.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], LogCleaningAbortedError), outcome
        assert read_records(log) == before and leftovers(log) == []
        assert worker.pid is not None  # the worker stays for the next pass
    finally:
        worker.close()


def test_a_worker_killed_in_a_pass_fails_it_and_the_next_pass_starts_another(log, manager):
    worker = CleanerProcess(CleanerConfig(dedupe_buffer_size=1 << 20, max_io_bytes_per_second=20_000), manager)
    try:
        written = write_updates(log, updates(keys=5, rounds=400))
        ready_to_clean(log)
        to_clean = manager.grab_filthiest_compacted_log(0)
        killed: list[int] = []

        def kill_the_worker_once_it_writes() -> None:
            wait_until(lambda: worker.pid is not None and leftovers(log), message="the worker to write")
            killed.append(worker.pid)  # type: ignore[arg-type]
            os.kill(killed[0], signal.SIGKILL)

        killer = threading.Thread(target=kill_the_worker_once_it_writes)
        killer.start()
        try:
            with pytest.raises(CleanerWorkerError, match="exited"):
                worker.clean(to_clean)
        finally:
            killer.join(10)
            manager.done_cleaning(TP)
        # The groups swapped in before the kill stay; the one being written is gone.
        assert killed and leftovers(log) == []
        assert latest_per_key(read_records(log)) == latest_per_key(written)

        worker.config = CleanerConfig(dedupe_buffer_size=1 << 20)
        to_clean = manager.grab_filthiest_compacted_log(0)
        try:
            worker.clean(to_clean)
        finally:
            manager.done_cleaning(TP)
        assert worker.pid not in (None, killed[0])
        assert read_records(log) == compacted(written)
    finally:
        worker.close()


def test_shutdown_aborts_the_pass_in_the_worker_and_stops_the_worker(log, caplog):
    caplog.set_level(logging.INFO, logger="broker.log")
    # The throttler first looks after 0.1 s of work, and 172 kB were once cleaned whole in 0.096 s, before the
    # abort: 1.7 MB read twice (the offset map, then the copy) at 0.5 MB/s keep the pass going for seconds.
    written = write_updates(log, updates(keys=5, rounds=4000))
    ready_to_clean(log)
    cleaner = cleaner_for(log, max_io_bytes_per_second=500_000, backoff_ms=10)
    others = set(child_pids(os.getpid()))  # the test process may have children of its own (a ZooKeeper server)
    cleaner.startup()
    try:
        wait_until(lambda: leftovers(log), 30, message="the worker to write a cleaned segment")
        workers = set(child_pids(os.getpid())) - others
    finally:
        cleaner.shutdown()
    assert workers and not workers & set(child_pids(os.getpid()))
    # The worker answered the abort, even throttled (it was not killed for want of an answer).
    assert "did not stop" not in caplog.text and "was aborted" in caplog.text
    assert leftovers(log) == [] and read_records(log) != compacted(written)  # stopped inside the pass
    assert latest_per_key(read_records(log)) == latest_per_key(written)


def test_a_pass_starting_after_abort_all_aborts_at_once(manager):
    manager.abort_all()
    with pytest.raises(LogCleaningAbortedError):
        manager.check_cleaning_aborted(TP)
    manager.resume_all()
    manager.check_cleaning_aborted(TP)
