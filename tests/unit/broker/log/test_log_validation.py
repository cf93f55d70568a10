"""What the log refuses from clients, as Kafka's ProduceRequest and LogValidator refuse it: more than
one batch, unknown codecs, control batches, bad sequences, and records that do not parse."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from kafka.record.util import encode_varint
from tests.unit.broker.log.log_support import make_batch, open_log, read_all

from broker.log import InvalidRecordError, LogConfig
from broker.log.errors import UnsupportedCompressionTypeError
from pipeline.protocol import compression
from pipeline.records.batch import parse_header
from pipeline.protocol.decompression_limit import decompress_at_most, size_bound
from pipeline.records import InvalidRecordsError, encode_batch, validate_records

_HEAD = struct.Struct(">qiibI")
_TAIL = struct.Struct(">hiqqqhii")


def zz(n: int) -> bytes:
    """A zigzag varint, written by kafka-python rather than the codec under test."""
    out = bytearray()
    encode_varint(n, out.append)
    return bytes(out)


def record(offset_delta: int, value: bytes = b"value", key: bytes | None = None, ts_delta: int = 0,
           headers: bytes = b"\x00", length_adjust: int = 0, key_length: int | None = None) -> bytes:
    if key_length is None:
        key_length = -1 if key is None else len(key)
    body = b"\x00" + zz(ts_delta) + zz(offset_delta) + zz(key_length) + (key or b"") + zz(len(value)) + value + headers
    return zz(len(body) + length_adjust) + body


def batch(area: bytes, count: int, last_delta: int | None = None, attributes: int = 0, producer_id: int = -1,
          base_sequence: int = -1) -> bytes:
    """A batch around ``area`` (already compressed if ``attributes`` says so) with a correct CRC."""
    tail = _TAIL.pack(attributes, count - 1 if last_delta is None else last_delta, 1000, 1000, producer_id,
                      0 if producer_id >= 0 else -1, base_sequence, count)
    crc = crc32c.crc32c(area, crc32c.crc32c(tail))
    return _HEAD.pack(0, 49 + len(area), -1, 2, crc) + tail + area


def refused(log, data: bytes) -> InvalidRecordError:
    with pytest.raises(InvalidRecordError) as raised:
        log.append_as_leader(data)
    assert raised.value.error_code == 87
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0
    return raised.value


def test_hand_built_batches_are_accepted_when_valid(log):
    headers = zz(2) + zz(1) + b"h" + zz(-1) + zz(2) + b"ab" + zz(3) + b"xyz"
    area = record(0, b"a", key=b"k1") + record(1, b"b" * 300, ts_delta=200, headers=headers) + record(2, b"")
    assert log.append_as_leader(batch(area, 3)).last_offset == 2
    gzipped = batch(compression.compress(compression.GZIP, area), 3, attributes=compression.GZIP)
    assert log.append_as_leader(gzipped).last_offset == 5


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_client_batches_are_accepted(log, codec):
    assert log.append_as_leader(make_batch(20, 50, compression=codec)).last_offset == 19


def test_offset_deltas_must_count_up_from_zero(log):
    error = refused(log, batch(record(0) + record(2) + record(1), 3))
    assert error.record_errors and error.record_errors[0][0] == 1


def test_fewer_records_than_declared(log):
    error = refused(log, batch(record(0) + record(1), 3))
    assert error.record_errors[0][0] == 2


def test_more_records_than_declared(log):
    refused(log, batch(record(0) + record(1) + record(2), 2))


@pytest.mark.parametrize("adjust", [-1, 1])
def test_record_length_must_match_its_fields(log, adjust):
    error = refused(log, batch(record(0) + record(1, length_adjust=adjust) + record(2), 3))
    assert error.record_errors[0][0] in (1, 2)


def test_negative_key_length_other_than_null(log):
    error = refused(log, batch(record(0) + record(1, key_length=-5), 2))
    assert error.record_errors[0][0] == 1


def test_null_header_key(log):
    headers = zz(1) + zz(-1) + zz(1) + b"v"
    error = refused(log, batch(record(0, headers=headers), 1))
    assert error.record_errors[0][0] == 0


def test_compressed_records_are_checked_after_decompression(log):
    area = record(0) + record(0)
    refused(log, batch(compression.compress(compression.LZ4, area), 2, attributes=compression.LZ4))


def test_compressed_payload_that_does_not_decompress(log):
    refused(log, batch(b"this is not a gzip stream", 1, attributes=compression.GZIP))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codec(log, codec):
    with pytest.raises(UnsupportedCompressionTypeError) as raised:
        log.append_as_leader(batch(record(0), 1, attributes=codec))
    assert raised.value.error_code == 76
    assert log.log_end_offset == 0


def test_control_batches_from_clients_are_refused(log):
    refused(log, batch(record(0), 1, attributes=0x20))


def test_producer_id_without_sequence_is_refused(log):
    refused(log, batch(record(0), 1, producer_id=7, base_sequence=-1))


def test_a_refused_append_leaves_the_log_as_it_was(tmp_path):
    log = open_log(tmp_path, LogConfig())
    try:
        log.append_as_leader(make_batch(2))
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(batch(record(0) + record(5), 2))
        assert read_all(log) == [(0, 2)]
        assert log.append_as_leader(make_batch(1)).first_offset == 2
    finally:
        log.close()


@pytest.mark.parametrize("shape", ["values", "keys", "nulls", "headers", "spread-timestamps", "varied"])
@pytest.mark.parametrize("codec", [0, 1, 3])
def test_validate_records_accepts_every_batch_the_codec_writes(shape, codec):
    n = 300
    values = [b"v%d" % i * (1 if shape != "varied" else i % 7 + 1) for i in range(n)]
    keys = [b"key%03d" % i for i in range(n)] if shape in ("keys", "varied") else None
    if shape == "nulls":
        values[5] = None
    headers = [[("h", b"x")]] * n if shape == "headers" else None
    timestamps = [1000 + i * 97 for i in range(n)] if shape == "spread-timestamps" else None
    data = encode_batch(values, keys, headers=headers, timestamps=timestamps, timestamp=1000, compression=codec)
    validate_records(data, 0, parse_header(data))


def test_validate_records_names_the_first_bad_record():
    data = batch(record(0) + record(1) + record(7) + record(3), 4)
    with pytest.raises(InvalidRecordsError) as raised:
        validate_records(data, 0, parse_header(data))
    assert raised.value.batch_index == 2


@pytest.mark.parametrize("codec", [1, 3, 4])  # snappy cannot squeeze 64 times
def test_a_compressed_batch_claiming_too_much_memory_is_refused_unread(tmp_path, codec):
    """A few KiB that decompress to gigabytes must not be decompressed into the broker's memory."""
    log = open_log(tmp_path, LogConfig(max_message_bytes=10_000))
    try:
        area = record(0, b"\x00" * 700_000)  # over 64 x max.message.bytes once decompressed
        squeezed = batch(compression.compress(codec, area), 1, attributes=codec)
        assert len(squeezed) < 10_000
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(squeezed)
        fits = record(0, b"\x00" * 600_000)
        assert log.append_as_leader(batch(compression.compress(codec, fits), 1, attributes=codec)).last_offset == 0
    finally:
        log.close()


@pytest.mark.parametrize("codec, raw_snappy", [(1, False), (2, False), (3, False), (4, False), (2, True)])
@pytest.mark.parametrize("data", [b"0123456789" * 10_000, bytes(range(256)) * 300, b"\x00" * 3_000_000],
                         ids=["text", "bytes", "zeros"])
def test_decompress_at_most(codec, raw_snappy, data):
    packed = bytes(cramjam.snappy.compress_raw(data)) if raw_snappy else compression.compress(codec, data)
    assert decompress_at_most(codec, packed, len(data)) == data
    with pytest.raises(compression.CompressionError):
        decompress_at_most(codec, packed, len(data) - 1)


@pytest.mark.parametrize("codec", [2, 3, 4])
def test_framing_bounds_hold_what_the_data_decompresses_to(codec):
    for data in (b"", b"x", b"0123456789" * 50_000, bytes(range(256)) * 3000):
        bound = size_bound(codec, compression.compress(codec, data))
        assert bound is not None and bound >= len(data)


@pytest.mark.parametrize("codec", [3, 4])
def test_reading_a_framing_bound_stops_once_past_the_limit(codec):
    packed = compression.compress(codec, bytes(range(256)) * 4000)  # several blocks
    assert size_bound(codec, packed) > 256 * 1024
    assert 1 <= size_bound(codec, packed, stop_above=1) < size_bound(codec, packed)
