"""CleanedTransactionMetadata: which batches of a cleaning pass belong to aborted transactions and which
markers have no data left, read from real batch headers."""

from __future__ import annotations

from broker.log import AbortedTxn, TransactionIndex
from broker.log.cleaned_transactions import CleanedTransactionMetadata
from pipeline.records import encode_batch
from pipeline.records.batch import parse_header
from pipeline.records.control import ControlRecordType, end_transaction_marker_batch

A, B = 11, 12


def data(pid: int, base_offset: int, count: int = 1, transactional: bool = True):
    return parse_header(encode_batch([b"v"] * count, producer_id=pid, producer_epoch=0, base_sequence=0,
                                     base_offset=base_offset, transactional=transactional))


def empty(pid: int, base_offset: int):
    return data(pid, base_offset)._replace(record_count=0)


def marker(pid: int, offset: int, committed: bool):
    return parse_header(end_transaction_marker_batch(pid, 0, committed, 0, 0, base_offset=offset))


ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def test_aborted_data_is_dropped_and_its_marker_kept_and_indexed(tmp_path):
    index = TransactionIndex(tmp_path / "0.txnindex")
    aborted = AbortedTxn(A, 0, 3, 4)
    txns = CleanedTransactionMetadata([aborted], index)
    assert txns.on_batch_read(data(A, 0, 2)) is True
    assert txns.on_batch_read(data(B, 2)) is False
    assert txns.on_control_batch_read(marker(A, 3, False), ABORT) is False
    assert index.entries() == [aborted]
    assert txns.on_batch_read(data(A, 5)) is False, "A's next transaction is not the aborted one"
    assert txns.on_control_batch_read(marker(B, 6, True), COMMIT) is False
    assert txns.on_control_batch_read(marker(A, 7, True), COMMIT) is False
    index.close()


def test_markers_without_data_left_may_go():
    txns = CleanedTransactionMetadata([AbortedTxn(A, 0, 3, 4)])
    assert txns.on_batch_read(empty(A, 2)) is True, "an emptied batch of the aborted transaction stays out"
    assert txns.on_control_batch_read(marker(A, 3, False), ABORT) is True, "but it is no data"
    assert txns.on_control_batch_read(marker(B, 4, True), COMMIT) is True
    assert txns.on_batch_read(data(B, 5, transactional=False)) is False
    assert txns.on_control_batch_read(marker(B, 6, True), 7) is False, "an unknown control record stays"


def test_a_pass_starting_after_an_aborted_transaction_does_not_think_it_open():
    txns = CleanedTransactionMetadata([AbortedTxn(A, 0, 3, 4), AbortedTxn(B, 8, 12, 13)])
    assert txns.on_batch_read(data(A, 10)) is False, "A's abort ended at 3, before this section"
    assert txns.on_batch_read(data(B, 11)) is True
