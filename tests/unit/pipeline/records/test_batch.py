"""The RecordBatch v2 header (pipeline.records.batch): parsing, CRC, building and patching."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from pipeline.records import encode_batch
from pipeline.records.batch import (
    CRC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_FLAG,
    CorruptBatchError,
    build_batch,
    compute_crc,
    crc_matches,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_leader_epoch,
    peek_offset_and_length,
    with_producer_fields,
)

TS = 1_700_000_000_000


def test_build_batch_writes_every_header_field_and_a_crc_kafka_python_accepts() -> None:
    area = encode_batch([b"a", b"b"], timestamp=TS)[HEADER_SIZE:]
    batch = build_batch(7, 3, TRANSACTIONAL_FLAG, 1, TS, TS + 5, 42, 2, 10, 2, area)
    header = parse_header(batch)
    assert header.size == len(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.magic, header.attributes) == (7, 3, 2, 16)
    assert (header.last_offset_delta, header.base_timestamp, header.max_timestamp) == (1, TS, TS + 5)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.record_count) == (42, 2, 10, 2)
    assert header.is_transactional and not header.is_control
    assert (header.last_offset, header.next_offset, header.last_sequence) == (8, 9, 11)
    assert crc_matches(batch)
    assert DefaultRecordBatch(bytearray(batch)).validate_crc()


def test_encode_batch_frames_through_build_batch() -> None:
    batch = encode_batch([b"x" * 10], timestamp=TS, base_offset=5)
    header = parse_header(batch)
    assert batch == build_batch(5, -1, 0, 0, TS, TS, -1, -1, -1, 1, batch[HEADER_SIZE:])
    assert peek_offset_and_length(batch) == (5, len(batch) - LOG_OVERHEAD)
    assert compute_crc(batch, 0, header.size) == header.crc


def test_patching_offsets_and_epoch_keeps_the_crc() -> None:
    buf = bytearray(encode_batch([b"v"], timestamp=TS))
    patch_base_offset(buf, 0, 1234)
    patch_leader_epoch(buf, 0, 9)
    header = parse_header(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 9)
    assert crc_matches(buf)


def test_producer_fields_are_inside_the_crc() -> None:
    batch = encode_batch([b"v", b"w"], timestamp=TS)
    numbered = with_producer_fields(batch, 5, 1, 100)
    header = parse_header(numbered)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 100)
    assert crc_matches(numbered) and header.crc != parse_header(batch).crc


def test_iter_batches_stops_at_a_torn_tail_and_refuses_bad_ones() -> None:
    one = encode_batch([b"a"], timestamp=TS)
    two = encode_batch([b"b", b"c"], timestamp=TS, base_offset=1)
    assert [pos for pos, _ in iter_batches(one + two + two[:30])] == [0, len(one)]
    bad_crc = bytearray(one)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC"):
        list(iter_batches(bad_crc))
    assert [pos for pos, _ in iter_batches(bad_crc, check_crc=False)] == [0]
    bad_magic = bytearray(one)
    bad_magic[16] = 1
    with pytest.raises(CorruptBatchError, match="magic 1"):
        list(iter_batches(bad_magic))
    short = bytearray(one)
    short[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(CorruptBatchError, match="below the header size"):
        list(iter_batches(short))
    assert parse_header(one).crc == int.from_bytes(one[CRC : CRC + 4], "big")
