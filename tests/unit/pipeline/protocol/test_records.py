"""RecordBatch v2 record codec: round trips, kafka-python as an independent oracle, corruption and framing."""

from __future__ import annotations

import random
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import decode_varint, encode_varint

from pipeline.records import batch as batch_format
from pipeline.records.batch import CONTROL_FLAG, TIMESTAMP_TYPE_MASK, CorruptBatchError, parse_header
from pipeline.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from pipeline.records import (
    BatchBuilder,
    Record,
    decode_batch,
    decode_records,
    encode_batch,
    record_size,
)
from pipeline.records.decode import _decode_uniform
from pipeline.records.varint import read_varint as _read_varint
from pipeline.records.varint import zigzag_varint as _zigzag_varint

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
TS = 1_700_000_000_000


def kafka_python_records(buf: bytes) -> list[tuple]:
    """Decode every batch in ``buf`` with kafka-python, checking each CRC."""
    out = []
    records = MemoryRecords(bytes(buf))
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)))
    return out


def kafka_python_build(codec: int, records: list[tuple], base_offset: int = 0) -> bytes:
    """Build a batch with kafka-python from (timestamp, key, value, headers) tuples."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, (timestamp, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=list(headers))
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf)


def as_tuples(records: list[Record]) -> list[tuple]:
    return [tuple(r) for r in records]


def random_records(rng: random.Random, n: int, *, keys: str, headers: bool, timestamps: bool) -> list[tuple]:
    out = []
    for i in range(n):
        if keys == "none":
            key = None
        elif keys == "all":
            key = rng.randbytes(rng.randrange(0, 40))
        else:
            key = None if rng.random() < 0.5 else rng.randbytes(rng.randrange(0, 40))
        roll = rng.random()
        value = None if roll < 0.1 else b"" if roll < 0.2 else rng.randbytes(rng.randrange(1, 400))
        hdrs = tuple((f"h{j}-é", None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))) for j in range(rng.randrange(0, 3))) if headers else ()
        timestamp = TS + rng.randrange(-5000, 5000) if timestamps else TS
        out.append((timestamp, key, value, hdrs))
    return out


def encode_tuples(records: list[tuple], codec: int, base_offset: int = 0) -> bytes:
    return encode_batch(
        [r[2] for r in records],
        [r[1] for r in records],
        timestamps=[r[0] for r in records],
        headers=[r[3] for r in records],
        base_offset=base_offset,
        compression=codec,
    )


def expected(records: list[tuple], base_offset: int = 0) -> list[tuple]:
    return [(base_offset + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)]


# --- varints ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n",
    [0, 1, -1, 63, 64, -64, -65, 8191, 8192, -8193, (1 << 20) - 1, 1 << 20, (1 << 27) - 1, 1 << 27,
     (1 << 34) - 1, 1 << 34, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)],
)
def test_varint_matches_kafka_python(n: int) -> None:
    ours = _zigzag_varint(n)
    theirs = bytearray()
    encode_varint(n, theirs.append)
    assert ours == bytes(theirs)
    assert _read_varint(ours + b"tail", 0) == (n, len(ours))
    assert decode_varint(ours, 0) == (n, len(ours))


def test_varint_sizes_at_boundaries() -> None:
    assert [len(_zigzag_varint(n)) for n in (63, 64, 8191, 8192, (1 << 20) - 1, 1 << 20, (1 << 27) - 1, 1 << 27)] == [
        1, 2, 2, 3, 3, 4, 4, 5,
    ]


# --- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_values_only_round_trip(codec: int) -> None:
    values = [b"v%03d" % i + b"x" * 196 for i in range(100)]
    buf = encode_batch(values, timestamp=TS, base_offset=42, compression=codec)
    header, records = decode_batch(buf)
    assert header.base_offset == 42 and header.record_count == 100 and header.compression == codec
    assert header.base_timestamp == header.max_timestamp == TS
    assert header.producer_id == -1 and header.base_sequence == -1 and header.partition_leader_epoch == -1
    assert records == [Record(42 + i, TS, None, v, ()) for i, v in enumerate(values)]
    assert isinstance(records[0], Record) and records[5].value == values[5]
    assert as_tuples(records) == kafka_python_records(buf)


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("keys", ["none", "all", "mixed"])
@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("timestamps", [False, True])
def test_random_round_trip_against_kafka_python(codec: int, keys: str, headers: bool, timestamps: bool) -> None:
    rng = random.Random(hash((codec, keys, headers, timestamps)))
    records = random_records(rng, rng.randrange(1, 300), keys=keys, headers=headers, timestamps=timestamps)
    buf = encode_tuples(records, codec, base_offset=1000)
    assert as_tuples(decode_batch(buf)[1]) == expected(records, 1000)
    assert kafka_python_records(buf) == expected(records, 1000)
    theirs = kafka_python_build(codec, records, base_offset=1000)
    assert as_tuples(decode_batch(theirs)[1]) == expected(records, 1000)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_uniform_batches_from_kafka_python(codec: int) -> None:
    # Same shape as our fast paths (equal lengths, one timestamp, no headers), written by another encoder.
    for key_len in (None, 8):
        records = [(TS, None if key_len is None else b"k%07d" % i, b"%0200d" % i, ()) for i in range(300)]
        theirs = kafka_python_build(codec, records, base_offset=7)
        assert as_tuples(decode_batch(theirs)[1]) == expected(records, 7)
        ours = encode_tuples(records, codec, base_offset=7)
        assert kafka_python_records(ours) == expected(records, 7)


@pytest.mark.parametrize("spread", [1, 63, 64, 10_000])
def test_uniform_shapes_with_per_record_timestamps(spread: int) -> None:
    # One-byte timestamp deltas keep the uniform shape; wider ones must still decode exactly.
    rng = random.Random(spread)
    for keyed in (False, True):
        records = [(TS, b"key-%04d" % 0 if keyed else None, b"%0100d" % 0, ())]
        records += [
            (TS + rng.randrange(-spread, spread + 1), b"key-%04d" % i if keyed else None, b"%0100d" % i, ())
            for i in range(1, 200)
        ]
        records[100] = (TS + spread, *records[100][1:])  # the widest delta occurs at least once
        for buf in (kafka_python_build(NONE, records, 3), encode_tuples(records, NONE, 3)):
            assert as_tuples(decode_batch(buf)[1]) == expected(records, 3)
            assert kafka_python_records(buf) == expected(records, 3)
            fast = _decode_uniform(buf, 61, len(buf), 200, 3, TS, None)
            if spread < 64:  # the shortcut must apply, and agree with the full parse
                assert fast is not None and as_tuples(fast) == expected(records, 3)
            else:
                assert fast is None


def test_uniform_shape_with_a_different_record_decodes_exactly() -> None:
    # Equal lengths everywhere, but one record differs in a byte the shape guess relies on.
    values = [b"y" * 50 for _ in range(20)]
    records = [(TS, None, v, ()) for v in values]
    records[13] = (TS + 1, None, values[13], ())  # a non-zero timestamp delta
    buf = kafka_python_build(NONE, records)
    assert as_tuples(decode_batch(buf)[1]) == expected(records)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_nulls_and_empties(codec: int) -> None:
    values = [None, b"", b"v", None, b""]
    keys = [b"", None, b"k", b"k2", None]
    buf = encode_batch(values, keys, timestamp=TS, compression=codec)
    records = decode_batch(buf)[1]
    assert [(r.key, r.value) for r in records] == list(zip(keys, values))
    assert kafka_python_records(buf) == [(i, TS, k, v, ()) for i, (k, v) in enumerate(zip(keys, values))]


@pytest.mark.parametrize("size", [0, 1, 63, 64, 8191, 8192, (1 << 20) - 1, 1 << 20])
def test_value_and_key_lengths_at_varint_boundaries(size: int) -> None:
    value = b"v" * size
    key = b"k" * min(size, 9000)
    for keys in (None, [key, key]):
        buf = encode_batch([value, value], keys, timestamp=TS)
        records = decode_batch(buf)[1]
        assert [r.value for r in records] == [value, value]
        assert [r.key for r in records] == ([None, None] if keys is None else keys)
        assert [r[3] for r in kafka_python_records(buf)] == [value, value]


def test_timestamp_deltas_negative_and_large() -> None:
    timestamps = [TS, TS - 1, TS - (1 << 27), TS + (1 << 27), TS + (1 << 40), 0, TS - 64, TS + 63]
    buf = encode_batch([b"x"] * len(timestamps), timestamps=timestamps)
    header, records = decode_batch(buf)
    assert [r.timestamp for r in records] == timestamps
    assert header.base_timestamp == TS and header.max_timestamp == TS + (1 << 40)
    assert [r[1] for r in kafka_python_records(buf)] == timestamps


@pytest.mark.parametrize("codec", [NONE, LZ4])
def test_large_batches_cross_offset_delta_varint_sizes(codec: int) -> None:
    n = 10_000  # offset deltas need 1, 2 and 3 bytes
    values = [b"%06d" % i for i in range(n)]
    for keys in (None, [b"key"] * n):
        buf = encode_batch(values, keys, timestamp=TS, base_offset=5, compression=codec)
        records = decode_batch(buf)[1]
        assert [r.offset for r in records] == list(range(5, 5 + n))
        assert [r.value for r in records] == values
        assert len(kafka_python_records(buf)) == n


def test_headers_round_trip() -> None:
    headers = [(("trace", b"abc"), ("empty", b""), ("null", None)), (), (("ünïcode", b"\x00\xff"),)]
    buf = encode_batch([b"a", b"b", b"c"], headers=headers, timestamp=TS)
    assert [r.headers for r in decode_batch(buf)[1]] == headers
    assert [r[4] for r in kafka_python_records(buf)] == headers


def test_header_fields_are_written() -> None:
    buf = encode_batch(
        [b"a", b"b"],
        timestamp=TS,
        base_offset=9,
        producer_id=77,
        producer_epoch=3,
        base_sequence=100,
        partition_leader_epoch=5,
        transactional=True,
        compression=ZSTD,
    )
    header = parse_header(buf)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 100)
    assert header.partition_leader_epoch == 5 and header.is_transactional and header.compression == ZSTD
    assert header.last_offset_delta == 1 and header.size == len(buf) and header.last_sequence == 101
    theirs = DefaultRecordBatch(buf)
    assert theirs.validate_crc() and theirs.producer_id == 77 and theirs.base_sequence == 100 and theirs.is_transactional


def test_default_timestamp_is_now() -> None:
    from pipeline.records import now_ms

    before = now_ms()
    record = decode_batch(encode_batch([b"x"]))[1][0]
    assert before <= record.timestamp <= now_ms()


def test_buffer_types() -> None:
    buf = encode_batch([b"one", b"two"], [b"k", b"k"], timestamp=TS)
    for view in (bytearray(buf), memoryview(buf), b"junk" + buf):
        pos = 4 if isinstance(view, bytes) else 0
        records = decode_batch(view, pos)[1]
        assert [r.value for r in records] == [b"one", b"two"]
        assert all(type(r.value) is bytes and type(r.key) is bytes for r in records)
    records, stop = decode_records(memoryview(buf + buf))
    assert len(records) == 4 and stop == 2 * len(buf)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch([b"a", b"b"], [b"k"])
    with pytest.raises(ValueError):
        encode_batch([b"a"], timestamps=[1, 2])
    with pytest.raises(ValueError):
        encode_batch([b"a"], headers=[(), ()])
    with pytest.raises(ValueError):
        encode_batch([b"a"], compression=9)
    with pytest.raises(TypeError):
        encode_batch(["text, not bytes"])


# --- decode_records: several batches, partial tails, filtering, corruption -----------------------


def three_batches(codec: int = NONE) -> tuple[bytes, list[bytes]]:
    batches = [
        encode_batch([b"a%d" % i for i in range(10)], timestamp=TS, base_offset=0, compression=codec),
        encode_batch([b"b%d" % i for i in range(10)], [b"k"] * 10, timestamp=TS, base_offset=10, compression=codec),
        encode_batch([b"c%d" % i for i in range(5)], timestamp=TS, base_offset=20, compression=codec),
    ]
    return b"".join(batches), batches


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_decode_records_all_batches(codec: int) -> None:
    buf, _ = three_batches(codec)
    records, stop = decode_records(buf)
    assert stop == len(buf)
    assert [r.offset for r in records] == list(range(25))
    assert as_tuples(records) == kafka_python_records(buf)


def test_trailing_partial_batch_is_ignored() -> None:
    buf, batches = three_batches()
    whole = len(batches[0]) + len(batches[1])
    for cut in (1, 11, 12, 60, 61, 62, len(batches[2]) - 1):
        records, stop = decode_records(buf[: whole + cut])
        assert stop == whole
        assert [r.offset for r in records] == list(range(20))
    assert decode_records(buf[:5]) == ([], 0)
    assert decode_records(b"") == ([], 0)


def test_min_offset() -> None:
    buf, _ = three_batches(LZ4)
    assert [r.offset for r in decode_records(buf, min_offset=15)[0]] == list(range(15, 25))
    assert [r.offset for r in decode_records(buf, min_offset=10)[0]] == list(range(10, 25))
    assert decode_records(buf, min_offset=25) == ([], len(buf))


def set_attributes(buf: bytes, pos: int, set_bits: int) -> bytes:
    """Return ``buf`` with bits added to the attributes of the batch at ``pos`` and its CRC fixed."""
    out = bytearray(buf)
    header = parse_header(out, pos)
    struct.pack_into(">h", out, pos + batch_format.ATTRIBUTES, header.attributes | set_bits)
    struct.pack_into(">I", out, pos + batch_format.CRC, batch_format.compute_crc(out, pos, header.size))
    return bytes(out)


def test_control_batches_are_skipped() -> None:
    data = encode_batch([b"d0", b"d1"], timestamp=TS, base_offset=0, producer_id=5, producer_epoch=0, transactional=True)
    # A COMMIT marker: key = version 0, type 1; value = version 0, coordinator epoch 3.
    marker = encode_batch(
        [struct.pack(">hi", 0, 3)], [struct.pack(">hh", 0, 1)], timestamp=TS, base_offset=2,
        producer_id=5, producer_epoch=0, transactional=True,
    )
    marker = set_attributes(marker, 0, CONTROL_FLAG)
    more = encode_batch([b"d3"], timestamp=TS, base_offset=3)
    buf = data + marker + more
    records, stop = decode_records(buf)
    assert [r.offset for r in records] == [0, 1, 3] and stop == len(buf)
    with_control = decode_records(buf, skip_control=False)[0]
    assert [r.offset for r in with_control] == [0, 1, 2, 3]
    assert with_control[2].key == struct.pack(">hh", 0, 1)
    assert DefaultRecordBatch(marker).is_control_batch


def test_log_append_time_uses_max_timestamp() -> None:
    buf = encode_batch([b"a", b"b"], timestamps=[TS, TS + 5])
    out = bytearray(set_attributes(buf, 0, TIMESTAMP_TYPE_MASK))
    struct.pack_into(">q", out, batch_format.MAX_TIMESTAMP, TS + 99)
    struct.pack_into(">I", out, batch_format.CRC, batch_format.compute_crc(out, 0, len(out)))
    assert [r.timestamp for r in decode_batch(bytes(out))[1]] == [TS + 99, TS + 99]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_crc_mismatch_is_detected(codec: int) -> None:
    buf, batches = three_batches(codec)
    damaged = bytearray(buf)
    damaged[len(batches[0]) + 70] ^= 0x01  # inside the second batch's records
    with pytest.raises(CorruptBatchError):
        decode_records(bytes(damaged))
    with pytest.raises(CorruptBatchError):
        decode_batch(bytes(damaged), len(batches[0]))
    assert len(decode_batch(bytes(damaged))[1]) == 10  # the first batch is intact


def test_check_crc_false_reads_damaged_values() -> None:
    buf = encode_batch([b"hello"], timestamp=TS)
    damaged = bytearray(buf)
    damaged[-2] ^= 0x20  # the value's last byte (the record's last byte is its header count)
    assert decode_batch(bytes(damaged), check_crc=False)[1][0].value == b"hellO"
    with pytest.raises(CorruptBatchError):
        decode_batch(bytes(damaged))


def fix_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, batch_format.CRC, batch_format.compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def test_bad_framing_is_corrupt_even_with_a_valid_crc() -> None:
    buf = encode_batch([b"abc", b"def"], timestamp=TS)
    too_many = bytearray(buf)
    struct.pack_into(">i", too_many, batch_format.RECORD_COUNT, 3)
    with pytest.raises(CorruptBatchError):
        decode_batch(fix_crc(too_many))
    too_few = bytearray(buf)
    struct.pack_into(">i", too_few, batch_format.RECORD_COUNT, 1)
    with pytest.raises(CorruptBatchError):
        decode_batch(fix_crc(too_few))
    bad_length = bytearray(buf)
    bad_length[61] = 0x7E  # the first record's length now overruns the batch
    with pytest.raises(CorruptBatchError):
        decode_batch(fix_crc(bad_length))
    short = bytearray(buf)
    struct.pack_into(">i", short, batch_format.BATCH_LENGTH, 20)
    with pytest.raises(CorruptBatchError):
        decode_records(bytes(short))
    with pytest.raises(CorruptBatchError):
        decode_batch(buf[:-1])
    bad_magic = bytearray(buf)
    bad_magic[batch_format.MAGIC] = 1
    with pytest.raises(CorruptBatchError):
        decode_records(bytes(bad_magic))


def test_undecompressable_batch_is_corrupt() -> None:
    buf = bytearray(encode_batch([b"x" * 100], timestamp=TS, compression=ZSTD))
    buf[70:80] = b"\x00" * 10
    with pytest.raises(CorruptBatchError):
        decode_batch(fix_crc(buf))


# --- BatchBuilder ---------------------------------------------------------------------------------


def test_builder_fills_up_to_max_bytes() -> None:
    builder = BatchBuilder(max_bytes=5000)
    appended = 0
    while builder.append(b"v" * 200, key=b"key", timestamp=TS + appended, headers=[("h", b"1")] if appended % 2 else None):
        appended += 1
    assert len(builder) == appended > 10
    buf = builder.build(base_offset=100)
    assert len(buf) == builder.size <= 5000
    assert len(buf) + 250 > 5000  # the refused record would not have fitted
    records = decode_batch(buf)[1]
    assert [r.offset for r in records] == list(range(100, 100 + appended))
    assert [r.timestamp for r in records] == [TS + i for i in range(appended)]
    assert kafka_python_records(buf) == as_tuples(records)


def test_builder_always_takes_the_first_record() -> None:
    builder = BatchBuilder(max_bytes=100)
    assert builder.is_empty()
    assert builder.append(b"x" * 1000)
    assert not builder.append(b"y")
    assert [r.value for r in decode_batch(builder.build())[1]] == [b"x" * 1000]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_builder_compression_and_header_fields(codec: int) -> None:
    builder = BatchBuilder(max_bytes=1 << 20, compression=codec)
    for i in range(50):
        assert builder.append(b"value %d" % i, timestamp=TS)
    buf = builder.build(base_offset=3, producer_id=9, producer_epoch=1, base_sequence=0)
    header, records = decode_batch(buf)
    assert header.compression == codec and header.producer_id == 9 and header.record_count == 50
    assert [r.value for r in records] == [b"value %d" % i for i in range(50)]
    with pytest.raises(TypeError):
        builder.build(compression=GZIP)


def test_record_size_is_exact() -> None:
    rng = random.Random(3)
    for ts_delta in (0, -1, 1 << 30):
        records = random_records(rng, 50, keys="mixed", headers=True, timestamps=False)
        buf = encode_batch(
            [r[2] for r in records], [r[1] for r in records], headers=[r[3] for r in records],
            timestamps=[TS] + [TS + ts_delta] * 49,
        )
        expected_size = batch_format.HEADER_SIZE + sum(
            record_size(i, 0 if i == 0 else ts_delta, r[1], r[2], r[3]) for i, r in enumerate(records)
        )
        assert expected_size == len(buf)
