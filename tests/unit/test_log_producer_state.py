"""Idempotent producers: duplicates, sequence gaps, epochs, and state rebuilt on reopen."""

from __future__ import annotations

import os

import pytest
from tests.unit.test_log_support import make_batch, open_log, read_all

from broker.log import (
    InvalidProducerEpochError,
    InvalidRecordError,
    LogConfig,
    OutOfOrderSequenceError,
)

PID = 4000


def idem(seq: int, count: int = 2, epoch: int = 0, pid: int = PID) -> bytes:
    return make_batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


@pytest.fixture
def log(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 20))
    yield log
    log.close()


def test_retried_batch_is_not_appended_twice(log):
    first = log.append_as_leader(idem(0))
    log.append_as_leader(make_batch(1))  # another (non-idempotent) producer in between
    second = log.append_as_leader(idem(2))
    size = log.size_in_bytes()
    retry = log.append_as_leader(idem(0))
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    retry = log.append_as_leader(idem(2))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (3, 4)
    assert second.first_offset == 3
    assert log.size_in_bytes() == size and log.log_end_offset == 5


def test_only_the_last_five_batches_are_remembered(log):
    for i in range(6):
        log.append_as_leader(idem(i * 2))
    assert log.append_as_leader(idem(2)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(0))


def test_sequence_gap_is_rejected(log):
    log.append_as_leader(idem(0))
    with pytest.raises(OutOfOrderSequenceError) as raised:
        log.append_as_leader(idem(3))
    assert raised.value.error_code == 45
    assert log.log_end_offset == 2
    assert log.append_as_leader(idem(2)).first_offset == 2


def test_a_producer_the_log_does_not_know_is_accepted_at_any_sequence(log):
    """Kafka (KIP-360): no state for the producer id, e.g. retention deleted all its batches."""
    assert log.append_as_leader(idem(5)).first_offset == 0
    assert log.append_as_leader(idem(7)).first_offset == 2
    assert log.append_as_leader(idem(5)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(10))


def test_a_producer_whose_batches_retention_deleted_carries_on(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=200, retention_ms=1000))
    try:
        for seq in range(0, 6, 2):
            log.append_as_leader(make_batch(2, 80, timestamp=1_000, producer_id=PID, producer_epoch=0,
                                            base_sequence=seq))
        log.append_as_leader(make_batch(1, 80, timestamp=100_000))  # another producer, in the active segment
        assert log.delete_retained_segments(now_ms=100_000) > 0
        assert log.log_start_offset == 6 and PID not in log.producer_state.producers
        assert log.append_as_leader(idem(6)).first_offset == 7
        assert log.append_as_leader(idem(8)).first_offset == 9
    finally:
        log.close()


def test_epochs(log):
    log.append_as_leader(idem(0, epoch=1))
    log.append_as_leader(idem(2, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(4, epoch=2))  # a new epoch starts at 0
    assert log.append_as_leader(idem(0, epoch=2)).first_offset == 4
    with pytest.raises(InvalidProducerEpochError) as raised:
        log.append_as_leader(idem(2, epoch=1))
    assert raised.value.error_code == 47
    assert not log.append_as_leader(idem(0, epoch=3)).duplicate  # a batch of the old epoch's seq 0 is new


def test_sequence_wraps_at_int32_max(log):
    log.append_as_leader(idem(0, count=1))
    log.producer_state.producers[PID].batches[-1] = log.producer_state.producers[PID].batches[-1]._replace(
        last_seq=2**31 - 3
    )
    info = log.append_as_leader(idem(2**31 - 2, count=2))  # sequences MAX-1, MAX
    assert info.first_offset == 1
    assert log.append_as_leader(idem(0, count=1)).first_offset == 3
    assert log.append_as_leader(idem(1, count=1)).first_offset == 4


def test_a_request_with_several_batches_changes_no_producer_state(log):
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(idem(0) + idem(2) + idem(0, pid=PID + 1, count=1))
    assert log.log_end_offset == 0
    assert log.producer_state.producers == {}
    assert log.append_as_leader(idem(0)).first_offset == 0
    assert log.append_as_leader(idem(2)).first_offset == 2


@pytest.mark.parametrize("drop_close_snapshot", [False, True])
def test_producer_state_rebuilt_after_reopen_from_snapshots(tmp_path, drop_close_snapshot):
    config = LogConfig(segment_bytes=500)
    log = open_log(tmp_path, config)
    for i in range(20):
        log.append_as_leader(idem(i * 2))
    log.append_as_leader(idem(0, pid=PID + 1))
    assert log.segment_count > 3
    log.close()
    snapshots = [name for name in os.listdir(tmp_path / "topic-0") if name.endswith(".snapshot")]
    assert f"{42:020d}.snapshot" in snapshots
    assert len(snapshots) > 3  # one per roll, one at close
    if drop_close_snapshot:  # then the newest roll snapshot plus a scan of the active segment
        os.unlink(tmp_path / "topic-0" / f"{42:020d}.snapshot")
    reopened = open_log(tmp_path, config, last_shutdown_clean=True)
    try:
        assert reopened.append_as_leader(idem(38)).duplicate
        assert reopened.append_as_leader(idem(0, pid=PID + 1)).duplicate
        with pytest.raises(OutOfOrderSequenceError):
            reopened.append_as_leader(idem(41))
        assert reopened.append_as_leader(idem(40)).first_offset == 42
    finally:
        reopened.close()


def test_producer_state_rebuilt_from_the_log_without_snapshots(tmp_path):
    config = LogConfig(segment_bytes=500)
    log = open_log(tmp_path, config)
    for i in range(10):
        log.append_as_leader(idem(i * 2))
    log.close()
    for name in os.listdir(tmp_path / "topic-0"):
        if name.endswith(".snapshot"):
            os.unlink(tmp_path / "topic-0" / name)
    reopened = open_log(tmp_path, config, recovery_point=0)
    try:
        assert reopened.append_as_leader(idem(18)).duplicate
        assert reopened.append_as_leader(idem(10)).duplicate
        assert reopened.append_as_leader(idem(20)).first_offset == 20
    finally:
        reopened.close()


def test_snapshot_past_a_truncated_tail_is_ignored(tmp_path):
    config = LogConfig(segment_bytes=1 << 20)
    log = open_log(tmp_path, config)
    for i in range(5):
        log.append_as_leader(idem(i * 2))
    log.close()  # snapshot at offset 10
    log_file = tmp_path / "topic-0" / f"{0:020d}.log"
    os.truncate(log_file, log_file.stat().st_size - 10)  # the last batch (seq 8, 9) is torn
    reopened = open_log(tmp_path, config, recovery_point=0)
    try:
        assert reopened.log_end_offset == 8
        assert not (tmp_path / "topic-0" / f"{10:020d}.snapshot").exists()
        assert not reopened.append_as_leader(idem(8)).duplicate
        assert read_all(reopened)[-1] == (8, 2)
    finally:
        reopened.close()


def test_producers_forgotten_when_retention_removes_their_batches(tmp_path):
    log = open_log(tmp_path, LogConfig(retention_ms=None, file_delete_delay_ms=0))
    try:
        log.append_as_leader(idem(0, pid=1))
        log.roll()
        log.append_as_leader(idem(0, pid=2))
        log.roll()
        log.config.retention_bytes = 0
        assert log.delete_retained_segments() == 2
        assert set(log.producer_state.producers) == set()
        log.append_as_leader(idem(0, pid=3))
        assert set(log.producer_state.producers) == {3}
    finally:
        log.close()
