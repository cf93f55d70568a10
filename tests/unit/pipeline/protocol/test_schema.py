"""The declaration vocabulary (versions, names, defaults) and the primitive types."""

from __future__ import annotations

import uuid

import pytest

from pipeline.protocol.codec import ProtocolError, decode_response, encode_response
from pipeline.protocol.messages import APIS
from pipeline.protocol.schema import Field, Versions, snake_case
from pipeline.protocol.types import UUID, DecodeError, Frame, encode_uvarint, read_uvarint


def test_version_ranges() -> None:
    assert 3 in Versions.parse("3+") and 2 not in Versions.parse("3+")
    assert list(Versions.parse("8-10")) == [8, 9, 10]
    assert list(Versions.parse("0")) == [0]
    assert list(Versions.parse("none")) == [] and 0 not in Versions.parse(None)


def test_snake_case_of_kafka_names() -> None:
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert snake_case("timeoutMs") == "timeout_ms"
    assert snake_case("PartitionIndex") == "partition_index"
    assert snake_case("IsrNodes") == "isr_nodes"
    assert snake_case("TopicId") == "topic_id"


def test_defaults_are_fresh_objects() -> None:
    field = Field("Items", "[]int32", "0+")
    make = field.default_factory(0)
    assert make() == [] and make() is not make()
    struct_field = Field("Leader", "LeaderIdAndEpoch", "0+", fields=(
        Field("LeaderId", "int32", "0+", default=-1), Field("LeaderEpoch", "int32", "1+", default=-1)))
    assert struct_field.default_factory(0)() == {"leader_id": -1}
    assert Field("Rack", "string", "0+", nullable="0+", default=None).default_factory(0)() is None


def test_declaration_mistakes_are_caught() -> None:
    with pytest.raises(ValueError):
        Field("X", "int33", "0+")
    with pytest.raises(ValueError):
        Field("X", "[]Thing", "0+")
    with pytest.raises(ValueError):
        Field("X", "int32", "0+", tag=0)


def test_declared_field_keys_are_unique_per_struct() -> None:
    def check(fields: tuple[Field, ...]) -> None:
        keys = [f.key for f in fields]
        assert len(keys) == len(set(keys)), keys
        tags = [f.tag for f in fields if f.tag is not None]
        assert len(tags) == len(set(tags)), tags
        for f in fields:
            check(f.fields)

    for api in APIS.values():
        check(api.request)
        check(api.response)


def test_uvarints() -> None:
    for value in (0, 1, 127, 128, 300, 16383, 16384, 2**31, 2**32 - 1):
        data = encode_uvarint(value)
        assert read_uvarint(data, 0) == (value, len(data))
    assert encode_uvarint(300) == b"\xac\x02"
    with pytest.raises(DecodeError):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)


def test_uuid_type() -> None:
    value = uuid.UUID("12345678-1234-5678-1234-567812345678")
    out = Frame()
    UUID.writer(False, False)(out, value)
    assert bytes(out) == value.bytes
    assert UUID.reader(False, False)(memoryview(bytes(out)), 0) == (value, 16)
    with pytest.raises(DecodeError):
        UUID.reader(False, False)(memoryview(bytes(out))[:15], 0)


def test_nested_struct_defaults_fill_absent_tagged_fields() -> None:
    # ApiVersions v3 with no tagged fields on the wire decodes to the declared defaults.
    frame = b"".join(bytes(c) for c in encode_response(18, 3, 1, {}))
    _, body = decode_response(18, 3, frame[4:])
    assert body["finalized_features_epoch"] == -1 and body["supported_features"] == []
    assert body["zk_migration_ready"] is False
    with pytest.raises(ProtocolError):
        decode_response(18, 3, frame[4:-1])
