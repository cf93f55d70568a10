"""The compiled codec: round trips of every declared API and version, headers, flexible encoding,
file regions in Fetch responses, and ProtocolError on malformed input."""

from __future__ import annotations

import random
import struct

import pytest

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import (
    SUPPORTED_VERSIONS,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
    read_request_header,
)
from pipeline.protocol.messages import APIS
from tests.unit.pipeline.protocol.test_schema_samples import normalize, sample_body

ALL_VERSIONS = [(api.key, v) for api in APIS.values() for v in api.version_range]


def _frame_bytes(chunks: list) -> bytes:
    assert all(isinstance(c, (bytes, bytearray, memoryview)) for c in chunks)
    return b"".join(bytes(c) for c in chunks)


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS)
def test_request_round_trip(api_key: int, version: int) -> None:
    rng = random.Random(api_key * 100 + version)
    for _ in range(5):
        body = sample_body(APIS[api_key].request, version, rng)
        frame = encode_request(api_key, version, 12345, "client-ü", body)
        assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
        header = read_request_header(frame, 4)
        assert header[:4] == (api_key, version, 12345, "client-ü")
        decoded = decode_request(header, frame, 4 + header.size)
        assert normalize(decoded) == body
        assert encode_request(api_key, version, 12345, "client-ü", decoded) == frame


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS)
def test_response_round_trip(api_key: int, version: int) -> None:
    rng = random.Random(api_key * 1000 + version)
    for _ in range(5):
        body = sample_body(APIS[api_key].response, version, rng)
        frame = _frame_bytes(encode_response(api_key, version, -7, body))
        assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
        correlation_id, decoded = decode_response(api_key, version, frame[4:])
        assert correlation_id == -7
        assert normalize(decoded) == body
        assert _frame_bytes(encode_response(api_key, version, -7, decoded)) == frame


def test_supported_versions_follow_the_declarations() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.API_VERSIONS] == (0, 3)
    assert SUPPORTED_VERSIONS[ApiKey.METADATA] == (0, 8)
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE] == (3, 8)
    assert SUPPORTED_VERSIONS[ApiKey.FETCH] == (4, 11)
    assert SUPPORTED_VERSIONS[ApiKey.LIST_OFFSETS] == (0, 5)
    assert SUPPORTED_VERSIONS[ApiKey.FIND_COORDINATOR] == (0, 3)
    assert SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS] == (0, 4)
    assert SUPPORTED_VERSIONS[ApiKey.DELETE_TOPICS] == (0, 3)
    assert SUPPORTED_VERSIONS[ApiKey.INIT_PRODUCER_ID] == (0, 4)
    assert is_flexible(ApiKey.INIT_PRODUCER_ID, 2) and not is_flexible(ApiKey.INIT_PRODUCER_ID, 1)
    assert is_flexible(ApiKey.API_VERSIONS, 3)
    assert not is_flexible(ApiKey.API_VERSIONS, 2)
    assert not is_flexible(ApiKey.FETCH, 11)
    assert not is_flexible(99, 0)


def test_decoding_gives_every_field_and_encoding_fills_defaults() -> None:
    frame = encode_request(ApiKey.FETCH, 11, 1, None, {
        "max_wait_ms": 500,
        "topics": [{"topic": "t", "partitions": [{"partition": 2, "fetch_offset": 42}]}],
        "not_a_field": "ignored",
    })
    header = read_request_header(frame, 4)
    assert header.client_id is None
    body = decode_request(header, frame, 4 + header.size)
    assert body == {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 0, "max_bytes": 0x7FFFFFFF,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [{
            "partition": 2, "current_leader_epoch": -1, "fetch_offset": 42,
            "log_start_offset": -1, "partition_max_bytes": 0}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def test_one_dict_serves_every_version() -> None:
    body = {"topics": [{"name": "a"}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": True}
    for version in range(0, 9):
        frame = encode_request(ApiKey.METADATA, version, 3, "c", body)
        header = read_request_header(frame, 4)
        decoded = decode_request(header, frame, 4 + header.size)
        assert decoded["topics"] == [{"name": "a"}]
        assert ("allow_auto_topic_creation" in decoded) == (version >= 4)


def test_nullable_array_and_string() -> None:
    frame = encode_request(ApiKey.METADATA, 1, 3, "c", {"topics": None})
    assert frame.endswith(b"\xff\xff\xff\xff")
    header = read_request_header(frame, 4)
    assert decode_request(header, frame, 4 + header.size) == {"topics": None}
    with pytest.raises(ProtocolError):
        encode_request(ApiKey.METADATA, 0, 3, "c", {"topics": None})
    frame = encode_request(ApiKey.PRODUCE, 3, 1, "c", {"acks": -1, "timeout_ms": 100})
    header = read_request_header(frame, 4)
    assert decode_request(header, frame, 4 + header.size)["transactional_id"] is None


def _request_round_trip(api_key: int, version: int, body: dict) -> dict:
    frame = encode_request(api_key, version, 1, "c", body)
    header = read_request_header(frame, 4)
    return decode_request(header, frame, 4 + header.size)


@pytest.mark.parametrize("api_key,version,body,null_key", [
    (ApiKey.JOIN_GROUP, 5, {"group_id": "g", "group_instance_id": None}, "group_instance_id"),
    (ApiKey.JOIN_GROUP, 6, {"group_id": "g", "group_instance_id": None}, "group_instance_id"),
    (ApiKey.SYNC_GROUP, 4, {"group_id": "g", "group_instance_id": None}, "group_instance_id"),
    (ApiKey.HEARTBEAT, 3, {"group_id": "g", "group_instance_id": None}, "group_instance_id"),
    (ApiKey.OFFSET_COMMIT, 8, {"group_id": "g", "group_instance_id": None}, "group_instance_id"),
    (ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": None}, "topics"),
    (ApiKey.OFFSET_FETCH, 6, {"group_id": "g", "topics": None}, "topics"),
])
def test_group_nullable_fields(api_key: int, version: int, body: dict, null_key: str) -> None:
    decoded = _request_round_trip(api_key, version, body)
    assert decoded["group_id"] == "g" and decoded[null_key] is None


def test_group_fields_null_only_where_kafka_allows() -> None:
    with pytest.raises(ProtocolError):
        encode_request(ApiKey.OFFSET_FETCH, 1, 1, "c", {"group_id": "g", "topics": None})
    # A static member's id and an unset one both leave JoinGroup v4 unchanged: the field starts at v5.
    assert "group_instance_id" not in _request_round_trip(ApiKey.JOIN_GROUP, 4, {"group_instance_id": "i"})
    assert _request_round_trip(ApiKey.JOIN_GROUP, 6, {"group_id": "g"})["group_instance_id"] is None
    assert _request_round_trip(ApiKey.OFFSET_COMMIT, 2, {"group_id": "g"})["generation_id"] == -1


def test_produce_records_decode_as_zero_copy_views() -> None:
    batch = b"\x00" * 8 + b"batch-bytes"
    frame = bytearray(encode_request(ApiKey.PRODUCE, 8, 9, "p", {
        "acks": 1, "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
    }))
    header = read_request_header(frame, 4)
    body = decode_request(header, frame, 4 + header.size)
    records = body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview) and records.obj is frame
    assert bytes(records) == batch


# ---------------------------------------------------------------- flexible versions

def test_api_versions_v3_flexible_request_bytes() -> None:
    frame = encode_request(ApiKey.API_VERSIONS, 3, 7, "me",
                           {"client_software_name": "kc", "client_software_version": "1.0"})
    # header v2: key, version, correlation id, int16 client id, empty tagged fields;
    # body: compact strings (length + 1) and the body's empty tagged fields.
    assert frame[4:] == (b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x02me\x00"
                         b"\x03kc\x041.0\x00")


def test_api_versions_v3_response_tagged_fields_round_trip() -> None:
    body = {
        "error_code": 0,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
        "throttle_time_ms": 0,
        "supported_features": [{"name": "metadata.version", "min_version": 1, "max_version": 20}],
        "finalized_features_epoch": 9,
        "finalized_features": [],
        "zk_migration_ready": True,
    }
    frame = _frame_bytes(encode_response(ApiKey.API_VERSIONS, 3, 77, body))
    # response header v0 even though v3 is flexible: no tagged-fields byte after the correlation id.
    assert frame[4:10] == b"\x00\x00\x00\x4d\x00\x00"
    tail = (b"\x03"                                                # three tagged fields
            b"\x00\x17\x02\x11metadata.version\x00\x01\x00\x14\x00"  # tag 0: compact array of 1
            b"\x01\x08" + struct.pack(">q", 9) +                   # tag 1: int64
            b"\x03\x01\x01")                                        # tag 3: bool; tag 2 is default
    assert frame.endswith(tail)
    assert decode_response(ApiKey.API_VERSIONS, 3, frame[4:]) == (77, body)


def test_unknown_tagged_fields_are_skipped() -> None:
    body = {"error_code": 0, "api_keys": [], "throttle_time_ms": 5}
    frame = bytearray(_frame_bytes(encode_response(ApiKey.API_VERSIONS, 3, 1, body)))
    assert frame[-1] == 0
    frame[-1:] = b"\x01\x2a\x03abc"  # one tagged field, tag 42, 3 bytes
    _, decoded = decode_response(ApiKey.API_VERSIONS, 3, frame[4:])
    assert decoded["throttle_time_ms"] == 5 and decoded["finalized_features_epoch"] == -1


def test_flexible_request_header_tagged_fields_are_consumed() -> None:
    frame = encode_request(ApiKey.API_VERSIONS, 3, 5, "abc", {})
    header = read_request_header(frame, 4)
    assert header.size == 2 + 2 + 4 + 2 + 3 + 1
    header0 = read_request_header(encode_request(ApiKey.API_VERSIONS, 2, 5, "abc", {}), 4)
    assert header0.size == 2 + 2 + 4 + 2 + 3


def test_header_of_unknown_api_or_version_is_readable() -> None:
    raw = struct.pack(">hhih", 18, 9, 42, 3) + b"cli" + b"\x00\x01\x02"
    assert read_request_header(raw) == RequestHeader(18, 9, 42, "cli", 13)
    raw = struct.pack(">hhih", 1234, 0, 1, -1)
    assert read_request_header(raw) == RequestHeader(1234, 0, 1, None, 10)
    with pytest.raises(ProtocolError, match="unsupported version"):
        decode_request(read_request_header(struct.pack(">hhih", 18, 9, 42, -1)), b"", 10)
    with pytest.raises(ProtocolError, match="unknown api key"):
        decode_request(RequestHeader(1234, 0, 1, None, 10), b"", 10)


# ---------------------------------------------------------------- file regions

class FileRegion:
    """Stands in for the broker's sendfile region: only ``size`` matters to the codec."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)


def test_fetch_response_with_file_regions() -> None:
    region_a = FileRegion(b"A" * 1000)
    region_b = FileRegion(b"B" * 10)
    body = {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 0,
        "responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "high_watermark": 5, "records": region_a},
            {"partition_index": 1, "high_watermark": 6, "records": b"inline"},
            {"partition_index": 2, "high_watermark": 7, "records": region_b},
            {"partition_index": 3, "error_code": 1, "records": None},
        ]}],
    }
    chunks = encode_response(ApiKey.FETCH, 11, 3, body)
    assert [type(c) is FileRegion for c in chunks] == [False, True, False, True, False]
    assert chunks[1] is region_a and chunks[3] is region_b
    wire = b"".join(c.data if isinstance(c, FileRegion) else bytes(c) for c in chunks)
    assert struct.unpack_from(">i", wire)[0] == len(wire) - 4
    assert wire[4 + 0:4 + 4] == b"\x00\x00\x00\x03"
    correlation_id, decoded = decode_response(ApiKey.FETCH, 11, wire[4:])
    records = [normalize(p["records"]) for p in decoded["responses"][0]["partitions"]]
    assert records == [region_a.data, b"inline", region_b.data, None]


def test_response_without_region_is_one_chunk() -> None:
    chunks = encode_response(ApiKey.FETCH, 4, 3, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": b"x" * 100}]}]})
    assert len(chunks) == 1


def test_region_needs_an_int_size() -> None:
    with pytest.raises(ProtocolError):
        encode_response(ApiKey.FETCH, 4, 3, {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "records": object()}]}]})


# ---------------------------------------------------------------- malformed input

def _produce_frame() -> bytes:
    return encode_request(ApiKey.PRODUCE, 7, 1, "p", {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000,
        "topic_data": [{"name": f"t{i}", "partition_data": [{"index": 0, "records": b"r" * 30}]}
                       for i in range(2)],
    })


def test_every_truncation_of_a_request_is_a_protocol_error() -> None:
    frame = _produce_frame()
    body_start = 4 + read_request_header(frame, 4).size
    for cut in range(4, len(frame)):
        with pytest.raises(ProtocolError):
            header = read_request_header(frame[:cut], 4)
            decode_request(header, frame[:cut], 4 + header.size)
    assert body_start < len(frame)


def test_every_truncation_of_a_flexible_response_is_a_protocol_error() -> None:
    rng = random.Random(5)
    body = sample_body(APIS[ApiKey.API_VERSIONS].response, 3, rng)
    body["api_keys"] = [{"api_key": 1, "min_version": 2, "max_version": 3}]
    body["finalized_features_epoch"] = 3
    frame = _frame_bytes(encode_response(ApiKey.API_VERSIONS, 3, 1, body))[4:]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_response(ApiKey.API_VERSIONS, 3, frame[:cut])


def test_negative_lengths_other_than_null_are_rejected() -> None:
    header_bytes = struct.pack(">hhih", 3, 1, 1, -1)
    header = read_request_header(header_bytes)
    with pytest.raises(ProtocolError):
        decode_request(header, header_bytes + struct.pack(">i", -2), header.size)
    assert decode_request(header, header_bytes + struct.pack(">i", -1), header.size) == {"topics": None}
    header0 = read_request_header(struct.pack(">hhih", 3, 0, 1, -1))
    with pytest.raises(ProtocolError):  # null is not allowed in v0
        decode_request(header0, header_bytes + struct.pack(">i", -1), header.size)
    with pytest.raises(ProtocolError):  # string length -5
        decode_request(header, header_bytes + struct.pack(">ih", 1, -5), header.size)
    with pytest.raises(ProtocolError):
        read_request_header(struct.pack(">hhih", 3, 1, 1, -3))


def test_huge_array_count_is_rejected_without_allocating() -> None:
    header_bytes = struct.pack(">hhih", 3, 1, 1, -1)
    header = read_request_header(header_bytes)
    with pytest.raises(ProtocolError, match="exceeds"):
        decode_request(header, header_bytes + struct.pack(">i", 2**31 - 1), header.size)


def test_invalid_utf8_is_a_protocol_error() -> None:
    header_bytes = struct.pack(">hhih", 3, 1, 1, -1)
    header = read_request_header(header_bytes)
    with pytest.raises(ProtocolError):
        decode_request(header, header_bytes + struct.pack(">ih", 1, 2) + b"\xff\xfe", header.size)


def test_trailing_bytes_are_ignored() -> None:
    frame = _produce_frame() + b"garbage"
    header = read_request_header(frame, 4)
    assert decode_request(header, frame, 4 + header.size)["timeout_ms"] == 30000


def test_encoding_bad_values_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        encode_response(ApiKey.METADATA, 1, 1, {"controller_id": "not an int"})
    with pytest.raises(ProtocolError):
        encode_response(ApiKey.METADATA, 1, 1, {"brokers": [{"host": None}]})
    with pytest.raises(ProtocolError, match="unsupported version"):
        encode_response(ApiKey.FETCH, 12, 1, {})
