"""The log cleaner and transactions: aborted records are removed and never shadow committed ones, markers
stay while their transaction has data (the cleaned segment keeping the aborted ones' .txnindex entries) and
go after delete.retention.ms once it has none, and nothing at or above the last stable offset is cleaned."""

from __future__ import annotations

import os
import time

import pytest
from tests.support.cleaner import cleaner_for, compact_config, keyed_batch, read_batches_of, ready_to_clean

from broker.log import AbortedTxn, Log
from broker.log.log_cleaner_manager import cleanable_offsets

A, B, C = 9001, 9002, 9003
# Record timestamps only; the cleaner's clock starts when the test does (markers become removable by their
# segment file's modification time, so a clock fixed at import -- minutes before the test runs in a full suite --
# would never pass delete.retention.ms after it).
NOW = int(time.time() * 1000)


class Clock:
    def __init__(self) -> None:
        self.now = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def log(tmp_path, clock):
    log = Log(tmp_path / "compacted-0", compact_config(delete_retention_ms=60_000), time_ms=clock)
    yield log
    log.close()


def put(log: Log, records, pid: int = -1, seq: int = -1, transactional: bool = False) -> int:
    batch = keyed_batch(records, timestamp=NOW, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=seq, transactional=transactional)
    return log.append_as_leader(batch).first_offset


def view(log: Log) -> tuple[list, list]:
    """(offset, key, value) of the data records; (offset, producer id) of the control batches."""
    data, markers = [], []
    for _, header, records in read_batches_of(log):
        if header.is_control:
            markers.append((header.base_offset, header.producer_id))
        else:
            data += [(r.offset, r.key, r.value) for r in records]
    return data, markers


def txn_entries(log: Log) -> list[AbortedTxn]:
    return [txn for segment in log._segments for txn in segment.txn_index.entries()]


def test_aborted_records_go_first_and_their_marker_after_delete_retention(log, clock):
    put(log, [(b"k1", b"committed")])                                           # 0
    put(log, [(b"k1", b"aborted"), (b"k2", b"aborted")], A, 0, transactional=True)  # 1-2
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=0)      # 3
    put(log, [(b"k3", b"in-b")], B, 0, transactional=True)                      # 4
    log.append_control_marker(B, 0, committed=True, coordinator_epoch=0)       # 5
    put(log, [(b"k4", b"plain")])                                               # 6
    ready_to_clean(log)
    assert txn_entries(log) == [AbortedTxn(A, 1, 3, 4)]
    cleaner = cleaner_for(log, time_ms=clock)
    assert cleaner.clean_once()
    data, markers = view(log)
    assert data == [(0, b"k1", b"committed"), (4, b"k3", b"in-b"), (6, b"k4", b"plain")]
    assert markers == [(3, A), (5, B)], "both transactions still had data in this pass"
    assert txn_entries(log) == [AbortedTxn(A, 1, 3, 4)], "the cleaned segment keeps the abort's entry"
    # An empty batch keeps A's producer state (its last data batch).
    assert log.producer_state.producers[A].last_data_offset == 2

    put(log, [(b"k4", b"newer")])                                               # 7
    ready_to_clean(log)
    assert cleaner.clean_once()
    assert view(log)[1] == [(3, A), (5, B)], "A's marker waits for delete.retention.ms"
    clock.now += 120_000
    put(log, [(b"k4", b"newest")])
    ready_to_clean(log)
    assert cleaner.clean_once()
    data, markers = view(log)
    assert markers == [(5, B)], "A's marker has no data left; B's commit still has k3"
    assert txn_entries(log) == []
    assert [value for _, _, value in data] == [b"committed", b"in-b", b"newest"]


def test_an_open_transaction_bounds_what_is_cleaned(log):
    put(log, [(b"k", b"v0")])
    first_open = put(log, [(b"k", b"open")], C, 0, transactional=True)
    put(log, [(b"k", b"v2")])
    ready_to_clean(log)
    assert log.last_stable_offset == first_open
    _, uncleanable, _ = cleanable_offsets(log, None, NOW)
    assert uncleanable <= first_open
    cleaner_for(log).clean_once()
    data, _ = view(log)
    assert (first_open, b"k", b"open") in data


def _aborted_then_clean_in_one_group(tmp_path) -> Log:
    log = Log(tmp_path / "logs" / "compacted-0", compact_config(segment_bytes=600, delete_retention_ms=60_000))
    put(log, [(b"k1", b"committed")])
    put(log, [(b"k1", b"aborted")], A, 0, transactional=True)
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=0)
    for i in range(8):
        put(log, [(b"k2", b"update-%d" % i)])
    ready_to_clean(log)
    assert len(log.segment_base_offsets()) > 2
    log.config.segment_bytes = 1 << 20  # one group for the pass
    return log


@pytest.mark.parametrize("log_renamed", [False, True], ids=["swap", "log-renamed"])
def test_a_crash_during_the_swap_keeps_the_cleaned_txn_index(tmp_path, monkeypatch, log_renamed):
    from tests.unit.broker.log.test_log_cleaner_recovery import crash_copy_at

    log = _aborted_then_clean_in_one_group(tmp_path)
    try:
        copy = crash_copy_at("during-swap", log, monkeypatch, tmp_path)
        assert txn_entries(log) == [AbortedTxn(A, 1, 2, 3)]
        assert (copy / "00000000000000000000.txnindex.swap").exists()
        if log_renamed:  # the .log took its final name, the .txnindex.swap not yet
            for name in os.listdir(copy):
                if not name.endswith((".swap", ".deleted")) and name[:20].isdigit() and \
                        int(name[:20]) < log.segment_base_offsets()[-1]:
                    os.rename(copy / name, copy / (name + ".deleted"))
            os.rename(copy / "00000000000000000000.log.swap", copy / "00000000000000000000.log")
        recovered = Log(copy, compact_config(), last_shutdown_clean=True)
        try:
            assert txn_entries(recovered) == [AbortedTxn(A, 1, 2, 3)]
            assert recovered.collect_aborted_transactions(0, recovered.log_end_offset) == [(A, 1)]
            assert not any(name.endswith(".swap") for name in os.listdir(copy))
        finally:
            recovered.close()
    finally:
        log.close()
