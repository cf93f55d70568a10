"""broker.log.log_validator: what a log refuses before an append, checked without a log."""

from __future__ import annotations

import struct

import pytest

from broker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from broker.log.log_validator import MAX_COMPRESSION_RATIO, validate_client_batch, validate_replicated_batches
from pipeline.protocol.compression import GZIP
from pipeline.records import encode_batch
from pipeline.records.batch import ATTRIBUTES, CONTROL_FLAG, CRC, compute_crc

TS = 1_700_000_000_000


def restamped(batch: bytes, at: int, fmt: str, value: int) -> bytearray:
    """``batch`` with the field at ``at`` set to ``value`` and its CRC made good again."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into(">I", out, CRC, compute_crc(out, 0, len(out)))
    return out


def test_a_good_batch_gives_what_the_append_needs() -> None:
    batch = encode_batch([b"a", b"b", b"c"], timestamps=[TS, TS + 9, TS + 4], producer_id=7, producer_epoch=1,
                         base_sequence=20)
    assert validate_client_batch(bytearray(batch), 1 << 20) == (0, len(batch), 2, TS + 9, 7, 1, 20, 0)


@pytest.mark.parametrize(
    "damage, error, match",
    [
        (lambda b: bytearray(), InvalidRecordError, "no record batch"),
        (lambda b: b[:40], InvalidRecordError, "not a whole batch"),
        (lambda b: b + b, InvalidRecordError, "exactly one record batch"),
        (lambda b: b[:-1], InvalidRecordError, "past the request"),
        (lambda b: b[:16] + b"\x01" + b[17:], InvalidRecordError, "magic 1"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), CorruptRecordError, "CRC"),
        (lambda b: restamped(b, ATTRIBUTES, ">h", 7), UnsupportedCompressionTypeError, "codec 7"),
        (lambda b: restamped(b, ATTRIBUTES, ">h", CONTROL_FLAG), InvalidRecordError, "control"),
        (lambda b: restamped(b, 57, ">i", 3), InvalidRecordError, "3 records but lastOffsetDelta 1"),
        (lambda b: restamped(b, 43, ">q", 5), InvalidRecordError, "invalid sequence"),
    ],
)
def test_what_a_client_may_not_write(damage, error, match) -> None:
    batch = bytearray(encode_batch([b"a", b"b"], timestamp=TS))
    with pytest.raises(error, match=match):
        validate_client_batch(bytearray(damage(batch)), 1 << 20)


def test_a_batch_over_max_message_bytes_is_too_large() -> None:
    batch = bytearray(encode_batch([b"x" * 500], timestamp=TS))
    with pytest.raises(RecordTooLargeError):
        validate_client_batch(batch, len(batch) - 1)


def test_records_that_do_not_parse_name_the_first_bad_one() -> None:
    batch = bytearray(encode_batch([b"a", b"b"], timestamp=TS))
    # the second record's offset delta (its 4th byte: length, attributes, timestamp delta, offset delta)
    second = 61 + 1 + batch[61] // 2
    batch[second + 3] = 8  # offset delta 4
    struct.pack_into(">I", batch, CRC, compute_crc(batch, 0, len(batch)))
    with pytest.raises(InvalidRecordError) as caught:
        validate_client_batch(batch, 1 << 20)
    assert caught.value.record_errors[0][0] == 1


def test_a_compressed_batch_is_not_decompressed_past_the_ratio() -> None:
    batch = bytearray(encode_batch([b"\x00" * 200_000], timestamp=TS, compression=GZIP))
    # 200,000 bytes once decompressed: within the ratio for a 4,000-byte limit, past it for 2,000
    assert len(batch) < 2_000 and 2_000 * MAX_COMPRESSION_RATIO < 200_000 < 4_000 * MAX_COMPRESSION_RATIO
    validate_client_batch(batch, 4_000)
    with pytest.raises(InvalidRecordError, match="do not parse"):
        validate_client_batch(batch, 2_000)


def test_a_compacted_topic_wants_a_key_on_every_record() -> None:
    batch = bytearray(encode_batch([b"a", b"b", b"c"], [b"k", None, None], timestamp=TS))
    validate_client_batch(batch, 1 << 20)
    with pytest.raises(InvalidRecordError, match="without a key") as caught:
        validate_client_batch(batch, 1 << 20, require_keys=True)
    assert [index for index, _ in caught.value.record_errors] == [1, 2]


def test_replicated_batches_leave_out_a_partial_tail() -> None:
    first = encode_batch([b"a"], timestamp=TS, base_offset=10, partition_leader_epoch=3)
    second = encode_batch([b"b", b"c"], timestamp=TS, base_offset=11)
    batches = validate_replicated_batches(bytearray(first + second + second[:70]), 1 << 20)
    assert [(pos, size, h.base_offset) for pos, size, h in batches] == [(0, len(first), 10),
                                                                         (len(first), len(second), 11)]
    assert validate_replicated_batches(bytearray(first[:60]), 1 << 20) == []


def test_replicated_batches_are_checked_for_framing_crc_and_size() -> None:
    batch = bytearray(encode_batch([b"a" * 100], timestamp=TS))
    bad_crc = batch[:-1] + bytes([batch[-1] ^ 1])
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_replicated_batches(bad_crc, 1 << 20)
    bad_magic = batch[:16] + b"\x03" + batch[17:]
    with pytest.raises(CorruptRecordError, match="magic 3"):
        validate_replicated_batches(bad_magic, 1 << 20)
    with pytest.raises(RecordTooLargeError):
        validate_replicated_batches(batch, len(batch) - 1)
