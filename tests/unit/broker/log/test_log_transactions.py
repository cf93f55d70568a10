"""Transactions in a partition's log: open transactions hold the LSO, markers end them, aborts go to the
.txnindex, fencing by producer and coordinator epochs, followers, snapshots and recovery."""

from __future__ import annotations

import json
import os
import time

import pytest
from tests.unit.broker.log.log_support import batches_in, make_batch, open_log

from broker.log import (
    AbortedTxn,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    LogConfig,
    TransactionCoordinatorFencedError,
)

A, B = 5000, 5001


NOW = int(time.time() * 1000)  # markers carry the wall clock: data this recent keeps them in its segment


def txn(pid: int, seq: int, count: int = 2, epoch: int = 0) -> bytes:
    return make_batch(count, timestamp=NOW, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def plain(count: int) -> bytes:
    return make_batch(count, timestamp=NOW)


def replicate(log) -> None:
    log.update_high_watermark(log.log_end_offset)


def txn_index_files(log) -> dict[str, bytes]:
    return {name: (log.dir / name).read_bytes() for name in sorted(os.listdir(log.dir)) if name.endswith(".txnindex")}


def test_an_open_transaction_holds_the_last_stable_offset(log):
    log.append_as_leader(plain(3))
    log.append_as_leader(txn(A, 0))
    log.append_as_leader(plain(1))
    replicate(log)
    assert (log.high_watermark, log.last_stable_offset) == (6, 3)
    with log.read(0, 1 << 20, max_offset=log.last_stable_offset) as fetched:
        assert batches_in(fetched.read_bytes()) == [(0, 3)]
    log.append_control_marker(A, 0, committed=True, coordinator_epoch=0)
    assert log.last_stable_offset == 3, "the marker is not replicated yet"
    replicate(log)
    assert log.last_stable_offset == log.high_watermark == 7
    assert log.collect_aborted_transactions(0, 7) == []


def test_the_lso_is_the_earliest_open_transaction_and_never_above_the_high_watermark(log):
    log.append_as_leader(txn(A, 0))
    log.append_as_leader(txn(B, 0))
    assert log.last_stable_offset == 0  # high watermark 0
    replicate(log)
    assert log.last_stable_offset == 0
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=0)
    replicate(log)
    assert log.last_stable_offset == 2
    log.append_control_marker(B, 0, committed=True, coordinator_epoch=0)
    replicate(log)
    assert log.last_stable_offset == 6


def test_an_abort_is_indexed_with_kafkas_last_stable_offset(log):
    log.append_as_leader(txn(A, 0))            # 0-1
    log.append_as_leader(txn(B, 0, count=3))   # 2-4
    log.append_as_leader(txn(A, 2))            # 5-6
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=3)  # 7
    replicate(log)
    assert log.segment_base_offsets() == [0]
    assert log._segments[0].txn_index.entries() == [AbortedTxn(A, 0, 7, 2)]
    assert log.collect_aborted_transactions(0, 8) == [(A, 0)]
    assert log.collect_aborted_transactions(8, 9) == []
    assert log.last_stable_offset == 2


def test_a_marker_without_data_in_the_partition_is_written_and_indexes_nothing(log):
    info = log.append_control_marker(A, 0, committed=False, coordinator_epoch=0)
    assert (info.first_offset, log.log_end_offset) == (0, 1)
    assert txn_index_files(log) == {}
    with log.read(0, 1 << 20) as fetched:
        data = fetched.read_bytes()
    assert data[21 + 1] & 0x30 == 0x30, "a control, transactional batch"


def test_markers_from_stale_producer_or_coordinator_epochs_are_fenced(log):
    log.append_as_leader(txn(A, 0, epoch=2))
    log.append_control_marker(A, 2, committed=True, coordinator_epoch=5)
    with pytest.raises(InvalidProducerEpochError):
        log.append_control_marker(A, 1, committed=False, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFencedError) as raised:
        log.append_control_marker(A, 2, committed=False, coordinator_epoch=4)
    assert raised.value.error_code == 52
    end = log.log_end_offset
    # A newer epoch (the coordinator fenced the producer) is accepted and becomes the producer's epoch.
    log.append_control_marker(A, 3, committed=False, coordinator_epoch=5)
    assert log.log_end_offset == end + 1
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(txn(A, 2, epoch=2))
    assert log.append_as_leader(txn(A, 0, epoch=3)).first_offset == end + 1


def test_a_zombie_transactional_batch_is_refused_and_plain_batches_may_not_join_a_transaction(log):
    log.append_as_leader(txn(A, 0, epoch=1))
    with pytest.raises(InvalidProducerEpochError) as raised:
        log.append_as_leader(txn(A, 2, epoch=0))
    assert raised.value.error_code == 47
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(make_batch(1, timestamp=NOW, producer_id=A, producer_epoch=1, base_sequence=2))


def test_a_retried_transactional_batch_is_a_duplicate(log):
    first = log.append_as_leader(txn(A, 0))
    again = log.append_as_leader(txn(A, 0))
    assert again.duplicate and again.first_offset == first.first_offset
    assert log.log_end_offset == 2


def test_a_follower_replays_markers_into_the_same_txn_index_and_lso(tmp_path, log):
    log.append_as_leader(txn(A, 0))
    log.append_as_leader(txn(B, 0))
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=1)
    log.append_as_leader(plain(2))
    with log.read(0, 1 << 20) as fetched:
        data = fetched.read_bytes()
    follower = open_log(tmp_path / "follower", LogConfig(segment_bytes=1 << 20))
    try:
        follower.append_as_follower(data)
        replicate(follower)
        replicate(log)
        assert follower.last_stable_offset == log.last_stable_offset == 2
        assert txn_index_files(follower) == txn_index_files(log) != {}
        assert follower.collect_aborted_transactions(0, 10) == [(A, 0)]
        # The follower fences as the leader does: its producer state has the coordinator epoch.
        with pytest.raises(TransactionCoordinatorFencedError):
            follower.append_control_marker(A, 0, committed=True, coordinator_epoch=0)
    finally:
        follower.close()


def test_truncating_a_follower_below_a_marker_reopens_its_transaction(log):
    log.append_as_leader(txn(A, 0))
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=0)
    log.append_as_leader(plain(1))
    log.truncate_to(2)
    replicate(log)
    assert txn_index_files(log) == {"00000000000000000000.txnindex": b""}
    assert log.collect_aborted_transactions(0, 10) == []
    assert log.last_stable_offset == 0


def _transactions(log) -> None:
    """Aborted A across a roll, open B, committed A afterwards."""
    log.append_as_leader(txn(A, 0))         # 0-1
    log.roll()
    log.append_as_leader(txn(B, 0))         # 2-3
    log.append_as_leader(txn(A, 2))         # 4-5
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=0)  # 6
    log.roll()
    log.append_as_leader(txn(A, 4))         # 7-8
    log.append_control_marker(A, 0, committed=True, coordinator_epoch=0)   # 9
    log.append_as_leader(plain(1))     # 10


@pytest.mark.parametrize("shutdown", ["clean", "unclean", "unclean-no-snapshots", "corrupt-txnindex"])
def test_a_restarted_log_rebuilds_the_lso_and_the_aborted_index(tmp_path, shutdown):
    config = LogConfig(segment_bytes=1 << 20)
    log = open_log(tmp_path, config)
    _transactions(log)
    replicate(log)
    expected_index = txn_index_files(log)
    assert expected_index == {"00000000000000000002.txnindex": expected_index["00000000000000000002.txnindex"]}
    log.close()
    clean = shutdown == "clean"
    if shutdown == "unclean-no-snapshots":
        for name in os.listdir(log.dir):
            if name.endswith(".snapshot"):
                os.unlink(log.dir / name)
    if shutdown == "corrupt-txnindex":
        with open(log.dir / "00000000000000000002.txnindex", "ab") as damaged:
            damaged.write(b"\x01\x02")
        clean = True
    reopened = open_log(tmp_path, config, last_shutdown_clean=clean, recovery_point=0 if not clean else 11)
    try:
        assert txn_index_files(reopened) == expected_index
        reopened.update_high_watermark(11)
        assert reopened.last_stable_offset == 2, "B's transaction is still open"
        assert reopened.collect_aborted_transactions(0, 11) == [(A, 0)]
        reopened.append_control_marker(B, 0, committed=True, coordinator_epoch=0)
        reopened.update_high_watermark(12)
        assert reopened.last_stable_offset == 12
    finally:
        reopened.close()


def test_a_version_1_snapshot_still_loads(tmp_path):
    config = LogConfig(segment_bytes=1 << 20)
    log = open_log(tmp_path, config)
    log.append_as_leader(make_batch(2, producer_id=A, producer_epoch=0, base_sequence=0))
    log.close()
    (snapshot,) = [log.dir / n for n in os.listdir(log.dir) if n.endswith(".snapshot")]
    body = json.loads(snapshot.read_text())
    assert body["version"] == 2
    body["version"] = 1
    body["producers"] = [entry[:3] for entry in body["producers"]]
    snapshot.write_text(json.dumps(body))
    reopened = open_log(tmp_path, config, last_shutdown_clean=True)
    try:
        assert reopened.append_as_leader(make_batch(2, producer_id=A, producer_epoch=0, base_sequence=0)).duplicate
    finally:
        reopened.close()


def test_retention_keeps_an_open_transaction_and_bounds_the_lso_by_the_log_start(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 20, retention_ms=1))
    try:
        log.append_as_leader(txn(A, 0, count=1))
        log.append_as_leader(txn(B, 0))
        log.append_control_marker(B, 0, committed=False, coordinator_epoch=0)
        log.roll()
        log.append_as_leader(plain(1))
        replicate(log)
        assert log.delete_retained_segments(now_ms=10**13) == 1
        assert not any(n.endswith(".txnindex") for n in os.listdir(log.dir))
        assert log.log_start_offset == 4
        assert log.last_stable_offset == 4, "A's transaction is open, but below the log start"
        assert A in log.producer_state.producers
        log.append_control_marker(A, 0, committed=True, coordinator_epoch=0)
        replicate(log)
        assert log.last_stable_offset == log.high_watermark == 6
    finally:
        log.close()


def test_a_fetch_learns_only_the_aborted_transactions_of_the_segment_it_reads(log):
    log.append_as_leader(txn(A, 0))                                          # 0-1
    log.append_control_marker(A, 0, committed=False, coordinator_epoch=0)   # 2
    log.roll()
    log.append_as_leader(txn(B, 0))                                          # 3-4
    log.append_control_marker(B, 0, committed=False, coordinator_epoch=0)   # 5
    replicate(log)
    assert log.collect_aborted_transactions(0, 6) == [(A, 0)]
    assert log.collect_aborted_transactions(3, 6) == [(B, 3)]
    assert log.aborted_transactions(0, 6) == [AbortedTxn(A, 0, 2, 3), AbortedTxn(B, 3, 5, 6)]


def test_a_transactional_batch_without_a_producer_id_is_an_invalid_record(log):
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(make_batch(1, timestamp=NOW, transactional=True))
    assert log.log_end_offset == 0
