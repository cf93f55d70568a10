"""The consumer protocol's Subscription and Assignment: bytes a real librdkafka sent, round trips of every
version, kafka-python's spec-driven encoder as an oracle, newer versions and malformed bytes."""

from __future__ import annotations

import random

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from pipeline.protocol.codec import ProtocolError
from pipeline.protocol.consumer_protocol import (
    ASSIGNMENT,
    LATEST_VERSION,
    SUBSCRIPTION,
    by_topic,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    topic_partitions,
)
from tests.unit.pipeline.protocol.test_codec_interop import kp_build
from tests.unit.pipeline.protocol.test_schema_samples import normalize, sample_body

# Captured from librdkafka 2.16.0 (confluent-kafka, range assignor, client.rack=rack-1) subscribing to
# capt-a and capt-b (3 partitions each): its JoinGroup protocol metadata and, as leader, its SyncGroup assignment.
LIBRDKAFKA_SUBSCRIPTION = bytes.fromhex(
    "0003000000020006636170742d610006636170742d620000000000000000ffffffff00067261636b2d31")
LIBRDKAFKA_ASSIGNMENT = bytes.fromhex(
    "0000000000020006636170742d61000000030000000000000001000000020006636170742d62000000030000000000000001"
    "0000000200000000")

CODECS = [(SUBSCRIPTION, ConsumerProtocolSubscription), (ASSIGNMENT, ConsumerProtocolAssignment)]


def test_librdkafka_subscription_decodes() -> None:
    assert normalize(decode_subscription(LIBRDKAFKA_SUBSCRIPTION)) == {
        "version": 3, "topics": ["capt-a", "capt-b"], "user_data": b"", "owned_partitions": [],
        "generation_id": -1, "rack_id": "rack-1"}


def test_librdkafka_assignment_decodes() -> None:
    decoded = decode_assignment(LIBRDKAFKA_ASSIGNMENT)
    assert decoded["version"] == 0 and bytes(decoded["user_data"]) == b""
    assert topic_partitions(decoded["assigned_partitions"]) == [
        ("capt-a", 0), ("capt-a", 1), ("capt-a", 2), ("capt-b", 0), ("capt-b", 1), ("capt-b", 2)]


def test_encoding_reproduces_librdkafka_bytes() -> None:
    assert encode_subscription({"topics": ["capt-a", "capt-b"], "user_data": b"", "rack_id": "rack-1"}) \
        == LIBRDKAFKA_SUBSCRIPTION
    assigned = by_topic([("capt-b", 2), ("capt-a", 1), ("capt-a", 0), ("capt-b", 0), ("capt-a", 2), ("capt-b", 1)])
    assert encode_assignment({"assigned_partitions": assigned, "user_data": b""}, version=0) == LIBRDKAFKA_ASSIGNMENT


@pytest.mark.parametrize("codec,theirs", CODECS, ids=["subscription", "assignment"])
@pytest.mark.parametrize("version", range(LATEST_VERSION + 1))
def test_round_trip_and_kafka_python_agree(codec, theirs, version: int) -> None:
    rng = random.Random(version)
    for _ in range(5):
        body = sample_body(codec.fields, version, rng)
        data = codec.encode(body, version)
        assert data == bytes(kp_build(theirs, body).encode(version=version))
        assert normalize(codec.decode(data)) == (version, body)


def test_newer_version_reads_known_fields_and_skips_the_rest() -> None:
    v3 = encode_subscription({"topics": ["t"], "owned_partitions": [{"topic": "t", "partitions": [4]}],
                              "generation_id": 7, "rack_id": "r"})
    v9 = b"\x00\x09" + v3[2:] + b"future-fields"
    decoded = decode_subscription(v9)
    assert decoded["version"] == 9 and decoded["topics"] == ["t"] and decoded["rack_id"] == "r"
    assert topic_partitions(decoded["owned_partitions"]) == [("t", 4)] and decoded["generation_id"] == 7


def test_older_versions_give_the_defaults_of_later_fields() -> None:
    decoded = decode_subscription(encode_subscription({"topics": ["t"]}, version=0))
    assert "owned_partitions" not in decoded and decoded["user_data"] is None and decoded["version"] == 0
    assert decode_assignment(encode_assignment({}, version=1)) == {
        "version": 1, "assigned_partitions": [], "user_data": None}


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff", b"\x00\x00\x00\x00\x00\x05ab",
                                  LIBRDKAFKA_SUBSCRIPTION[:-3]])
def test_malformed_bytes_are_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_subscription(data)
    with pytest.raises(ProtocolError):
        decode_assignment(data[:5])


def test_unknown_version_cannot_be_written() -> None:
    with pytest.raises(ProtocolError):
        encode_subscription({"topics": []}, version=LATEST_VERSION + 1)
