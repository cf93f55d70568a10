"""Log append and read: offsets, validation (all or nothing), fetch regions, timestamps."""

from __future__ import annotations

import os

import crc32c
import pytest
from tests.unit.broker.log.log_support import batches_in, make_batch, open_log, read_all

from broker.log import (
    CorruptRecordError,
    InvalidRecordError,
    LogConfig,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from pipeline.records.batch import CRC, iter_batches, parse_header


def log_file_bytes(log) -> int:
    return sum(os.path.getsize(log.dir / name) for name in os.listdir(log.dir) if name.endswith(".log"))


def index_file_bytes(log) -> int:
    return sum(os.path.getsize(log.dir / name) for name in os.listdir(log.dir) if name.endswith("index"))


def test_offsets_are_assigned_and_leader_epoch_set(log):
    first = log.append_as_leader(make_batch(5), leader_epoch=7)
    second = log.append_as_leader(make_batch(3))
    assert (first.first_offset, first.last_offset, first.duplicate) == (0, 4, False)
    assert (second.first_offset, second.last_offset) == (5, 7)
    assert first.log_append_time == -1 and first.log_start_offset == 0
    assert log.log_end_offset == 8
    with log.read(0, 1 << 20) as fetched:
        data = fetched.read_bytes()
    headers = [h for _, h in iter_batches(data)]  # CRCs still valid after patching
    assert [(h.base_offset, h.record_count, h.partition_leader_epoch) for h in headers] == [(0, 5, 7), (5, 3, -1)]


def test_several_batches_in_one_append_are_refused_whole(log):
    """Kafka: a Produce v3+ partition entry must hold exactly one batch (INVALID_RECORD), not the
    first few batches up to a problem."""
    log.append_as_leader(make_batch(1))
    with pytest.raises(InvalidRecordError) as raised:
        log.append_as_leader(make_batch(2) + make_batch(3) + make_batch(1))
    assert raised.value.error_code == 87
    assert log.log_end_offset == 1
    assert read_all(log) == [(0, 1)]


def test_read_from_the_middle_of_a_batch_starts_at_that_batch(log):
    for _ in range(4):
        log.append_as_leader(make_batch(10))
    with log.read(25, 1 << 20) as fetched:
        assert batches_in(fetched.read_bytes()) == [(20, 10), (30, 10)]
    with log.read(29, 1 << 20) as fetched:
        assert batches_in(fetched.read_bytes())[0] == (20, 10)
    with log.read(30, 1 << 20) as fetched:
        assert batches_in(fetched.read_bytes())[0] == (30, 10)


def test_read_is_capped_by_max_bytes_and_may_end_mid_batch(log):
    batch = make_batch(4, 100)
    for _ in range(5):
        log.append_as_leader(batch)
    with log.read(0, len(batch) * 2 + 10) as fetched:
        assert fetched.size == len(batch) * 2 + 10
        assert fetched.position == 0
        assert batches_in(fetched.read_bytes()) == [(0, 4), (4, 4)]


def test_batch_larger_than_max_bytes_is_returned_whole(log):
    log.append_as_leader(make_batch(2, 10))
    big = make_batch(20, 500)
    log.append_as_leader(big)
    log.append_as_leader(make_batch(2, 10))
    with log.read(5, 100) as fetched:
        assert fetched.size == len(big)
        assert batches_in(fetched.read_bytes()) == [(2, 20)]
    with log.read(5, 100, min_one_batch=False) as fetched:
        assert fetched.size == 100
        assert batches_in(fetched.read_bytes()) == []


def test_read_at_log_end_is_empty_and_outside_range_raises(log):
    log.append_as_leader(make_batch(3))
    with log.read(3, 1000) as fetched:
        assert (fetched.fd, fetched.size) == (None, 0)
        assert fetched.read_bytes() == b""
    with pytest.raises(OffsetOutOfRangeError) as raised:
        log.read(4, 1000)
    assert raised.value.error_code == 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)


def test_read_never_crosses_a_segment_end_and_continues_in_the_next(log):
    log.append_as_leader(make_batch(3))
    log.roll()
    log.append_as_leader(make_batch(2))
    assert log.segment_base_offsets() == [0, 3]
    with log.read(0, 1 << 20) as fetched:
        assert batches_in(fetched.read_bytes()) == [(0, 3)]
    with log.read(3, 1 << 20) as fetched:
        assert batches_in(fetched.read_bytes()) == [(3, 2)]


def test_read_returns_region_as_of_the_call(log):
    log.append_as_leader(make_batch(2))
    fetched = log.read(0, 1 << 20)
    log.append_as_leader(make_batch(2))
    try:
        assert batches_in(fetched.read_bytes()) == [(0, 2)]
    finally:
        fetched.close()


def test_fetch_slice_fd_outlives_segment_deletion(tmp_path):
    log = open_log(tmp_path, LogConfig(retention_ms=1000, file_delete_delay_ms=0))
    try:
        log.append_as_leader(make_batch(3, timestamp=1000))
        log.roll()
        log.append_as_leader(make_batch(3, timestamp=50_000))
        fetched = log.read(0, 1 << 20)
        assert log.delete_retained_segments(now_ms=10_000) == 1
        assert not (log.dir / "00000000000000000000.log").exists()
        with fetched:
            assert batches_in(fetched.read_bytes()) == [(0, 3)]
            out_r, out_w = os.pipe()
            try:
                assert os.sendfile(out_w, fetched.fd, fetched.position, fetched.size) == fetched.size
            finally:
                os.close(out_r)
                os.close(out_w)
    finally:
        log.close()


def test_sparse_index_used_for_many_batches(tmp_path):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=512))
    try:
        for _ in range(300):
            log.append_as_leader(make_batch(2, 200))
        assert os.path.getsize(log.dir / "00000000000000000000.index") > 8 * 50
        for offset in (0, 1, 77, 301, 598, 599):
            with log.read(offset, 1) as fetched:
                assert batches_in(fetched.read_bytes()) == [(offset - offset % 2, 2)]
    finally:
        log.close()


def corrupt(batch: bytes, at: int) -> bytes:
    damaged = bytearray(batch)
    damaged[at] ^= 0xFF
    return bytes(damaged)


def test_bad_crc_rejected_without_touching_the_log(tmp_path):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=0))
    try:
        log.append_as_leader(make_batch(2))
        log.append_as_leader(make_batch(2))
        before = (log_file_bytes(log), index_file_bytes(log), log.log_end_offset)
        good = make_batch(3)
        bad = corrupt(make_batch(3), len(good) - 2)
        with pytest.raises(CorruptRecordError) as raised:
            log.append_as_leader(bad)
        assert raised.value.error_code == 2
        with pytest.raises(CorruptRecordError):
            log.append_as_leader(corrupt(good, CRC))
        assert (log_file_bytes(log), index_file_bytes(log), log.log_end_offset) == before
        assert log.append_as_leader(good).first_offset == 4
    finally:
        log.close()


def test_framing_errors(log):
    good = make_batch(2)
    with pytest.raises(InvalidRecordError) as raised:
        log.append_as_leader(good + good[:30])
    assert raised.value.error_code == 87
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(good[:-1])
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b"")
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(InvalidRecordError):  # Kafka: Produce v3+ carries only magic 2
        log.append_as_leader(bytes(bad_magic))
    short_length = bytearray(good)
    short_length[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(short_length))
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0


def test_record_count_must_match_offset_delta(log):
    batch = bytearray(make_batch(3))
    batch[57:61] = (4).to_bytes(4, "big")  # recordCount is covered by the CRC: recompute it
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(bytes(batch))
    assert log.log_end_offset == 0


def test_batch_over_max_message_bytes_rejected(tmp_path):
    small = make_batch(1, 10)
    big = make_batch(1, 2000)
    log = open_log(tmp_path, LogConfig(max_message_bytes=1000))
    try:
        with pytest.raises(RecordTooLargeError) as raised:
            log.append_as_leader(big)
        assert raised.value.error_code == 10
        assert log.size_in_bytes() == 0
        assert log.append_as_leader(small).last_offset == 0
    finally:
        log.close()


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=256, segment_bytes=4000))
    try:
        for i in range(100):
            log.append_as_leader(make_batch(2, 100, timestamp=10_000 + i * 100))
        assert log.segment_count > 3
        # The first record whose own timestamp reaches the target, not its batch's first offset and max timestamp.
        assert log.offset_for_timestamp(0) == (0, 10_000)
        assert log.offset_for_timestamp(10_001) == (1, 10_001)
        assert log.offset_for_timestamp(10_002) == (2, 10_100)
        assert log.offset_for_timestamp(15_050) == (102, 15_100)
        assert log.offset_for_timestamp(19_901) == (199, 19_901)
        assert log.offset_for_timestamp(19_902) is None
    finally:
        log.close()


def test_offset_for_timestamp_with_out_of_order_timestamps(log):
    for ts in (5000, 3000, 7000, 6000, 9000):
        log.append_as_leader(make_batch(1, timestamp=ts))
    assert log.offset_for_timestamp(4000) == (0, 5000)
    assert log.offset_for_timestamp(6500) == (2, 7000)
    assert log.offset_for_timestamp(8000) == (4, 9000)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_offset_for_timestamp_inside_a_batch(log, codec):
    log.append_as_leader(make_batch(3, timestamp=1_000))
    log.append_as_leader(make_batch(10, 50, timestamp=5_000, compression=codec))  # offsets 3..12, ts 5000..5009
    assert log.offset_for_timestamp(5_004) == (7, 5_004)
    assert log.offset_for_timestamp(4_000) == (3, 5_000)
    assert log.offset_for_timestamp(5_009) == (12, 5_009)
    assert log.offset_for_timestamp(1_001) == (1, 1_001)


def test_compressed_batches_are_stored_as_sent(log):
    batch = make_batch(50, 100, compression=1)
    log.append_as_leader(batch, leader_epoch=3)
    with log.read(10, 1 << 20) as fetched:
        data = fetched.read_bytes()
    assert len(data) == len(batch)
    assert data[21:] == batch[21:]
    header = parse_header(data)
    assert (header.record_count, header.partition_leader_epoch, header.compression) == (50, 3, 1)
