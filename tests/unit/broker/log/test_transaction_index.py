"""The .txnindex file: Kafka's 34-byte entries, collection by overlap, truncation, damage detection."""

from __future__ import annotations

import struct

import pytest

from broker.log import AbortedTxn, TransactionIndex
from broker.log.errors import CorruptRecordError


def test_entries_are_written_in_kafkas_layout_and_read_back(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert index.entries() == [] and not path.exists()
    index.append(AbortedTxn(7, 0, 5, 6))
    index.append(AbortedTxn(8, 3, 9, 10))
    index.close()
    data = path.read_bytes()
    assert len(data) == 68
    assert struct.unpack(">hqqqq", data[:34]) == (0, 7, 0, 5, 6)
    assert TransactionIndex(path).entries() == [AbortedTxn(7, 0, 5, 6), AbortedTxn(8, 3, 9, 10)]


def test_collect_finds_overlapping_transactions_and_knows_when_it_is_complete(tmp_path):
    index = TransactionIndex(tmp_path / "0.txnindex")
    index.append(AbortedTxn(1, 0, 4, 5))
    index.append(AbortedTxn(2, 6, 9, 10))
    index.append(AbortedTxn(3, 12, 20, 21))
    assert index.collect(5, 10) == ([AbortedTxn(2, 6, 9, 10)], True)
    assert index.collect(0, 100) == ([AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 9, 10), AbortedTxn(3, 12, 20, 21)],
                                     False)
    assert index.collect(21, 30)[0] == []


def test_truncation_drops_entries_whose_marker_is_cut(tmp_path):
    path = tmp_path / "0.txnindex"
    index = TransactionIndex(path)
    index.append(AbortedTxn(1, 0, 4, 5))
    index.append(AbortedTxn(2, 6, 9, 10))
    index.truncate_to(9)
    index.close()
    assert path.stat().st_size == 34
    assert TransactionIndex(path).entries() == [AbortedTxn(1, 0, 4, 5)]


def test_an_entry_out_of_order_is_refused(tmp_path):
    index = TransactionIndex(tmp_path / "0.txnindex")
    index.append(AbortedTxn(1, 0, 4, 5))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 0, 4, 5))
    index.close()


@pytest.mark.parametrize("damage", [b"\x00" * 10, struct.pack(">hqqqq", 3, 1, 0, 1, 2)])
def test_a_torn_or_unknown_file_is_inconsistent(tmp_path, damage):
    path = tmp_path / "0.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 1, 2) + damage)
    index = TransactionIndex(path)
    assert not index.is_consistent()
    with pytest.raises(CorruptRecordError):
        index.entries()
