"""Control batches: the end-transaction markers, checked against kafka-python's reader."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from pipeline.records.batch import parse_header
from pipeline.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    end_transaction_marker_batch,
    parse_control_key,
    parse_end_transaction_marker,
)
from pipeline.records.decode import decode_batch


@pytest.mark.parametrize("committed", [True, False])
def test_a_marker_batch_is_a_transactional_control_batch_with_one_record(committed: bool) -> None:
    batch = end_transaction_marker_batch(4242, 7, committed, coordinator_epoch=3, timestamp=1_700_000_000_000,
                                         base_offset=55, partition_leader_epoch=2)
    header, records = decode_batch(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, -1)
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset_delta) == (55, 2, 0)
    assert len(records) == 1
    marker = parse_end_transaction_marker(records[0].key, records[0].value)
    expected = ControlRecordType.COMMIT if committed else ControlRecordType.ABORT
    assert marker == EndTransactionMarker(expected, 3)
    assert marker.committed is committed
    assert records[0].timestamp == 1_700_000_000_000


def test_kafka_python_reads_our_marker_as_kafka_writes_it() -> None:
    theirs = DefaultRecordBatch(bytearray(end_transaction_marker_batch(9, 1, True, 5, 1000)))
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    (record,) = list(theirs)
    assert bytes(record.key) == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert bytes(record.value) == b"\x00\x00\x00\x00\x00\x05"  # version 0, coordinator epoch 5


def test_unknown_control_types_are_returned_as_ints_and_short_keys_refused() -> None:
    assert parse_control_key(b"\x00\x00\x00\x05") == 5
    assert parse_end_transaction_marker(b"\x00\x00\x00\x05", b"") is None
    with pytest.raises(ValueError):
        parse_control_key(b"\x00")
    with pytest.raises(ValueError):
        parse_end_transaction_marker(b"\x00\x00\x00\x00", b"\x00")
    assert parse_header(end_transaction_marker_batch(1, 0, False, 0, 0)).is_control
