"""zookeeper.connect parsing and the JSON of the cluster's znodes."""

from __future__ import annotations

import json
import uuid

import pytest

from pipeline.zk import layout
from pipeline.zk.client import split_connect_string


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:2181", ("127.0.0.1:2181", "")),
    ("a:1,b:2/dc1", ("a:1,b:2", "/dc1")),
    ("a:1/dc1/", ("a:1", "/dc1")),
    ("a:1/", ("a:1", "")),
    ("a:1/x/y", ("a:1", "/x/y")),
])
def test_connect_strings(text, expected):
    assert split_connect_string(text) == expected


@pytest.mark.parametrize("text", ["", "/dc1", "host/dc1", "a:b/dc1", "a:1,,b:2"])
def test_bad_connect_strings(text):
    with pytest.raises(ValueError):
        split_connect_string(text)


def test_paths_follow_kafkas_layout():
    assert layout.broker_path(3) == "/brokers/ids/3"
    assert layout.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert layout.owner_path("g", "t", 5) == "/consumers/g/owners/t/5"
    assert layout.offset_path("g", "t", 5) == "/consumers/g/offsets/t/5"
    assert layout.consumer_path("g", "host-1") == "/consumers/g/ids/host-1"


def test_json_round_trips():
    assert layout.parse_topic_assignment(layout.topic_assignment({1: [2], 0: [1]})) == {0: [1], 1: [2]}
    assert json.loads(layout.topic_assignment({0: [1]})) == {"version": 1, "partitions": {"0": [1]}}
    state = layout.decode(layout.partition_state(leader=2, leader_epoch=7, isr=[2], controller_epoch=3))
    assert (state["leader"], state["leader_epoch"], state["isr"]) == (2, 7, [2])
    registration = layout.decode(layout.broker_registration("127.0.0.1", 9092))
    assert (registration["host"], registration["port"]) == ("127.0.0.1", 9092)
    assert registration["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    consumer = layout.decode(layout.consumer_registration({"events": 2}, "static"))
    assert consumer["subscription"] == {"events": 2} and consumer["pattern"] == "static"
    assert layout.decode(b"") == {}


@pytest.mark.parametrize("partitions,factor", [(1, 1), (9, 2), (10, 3), (999, 1), (2500, 3)])
def test_the_creation_size_estimate_is_an_upper_bound_of_the_transaction(partitions, factor):
    brokers = list(range(1001, 1001 + factor))
    replicas = {p: [brokers[(p + r) % factor] for r in range(factor)] for p in range(partitions)}
    ops = layout.topic_creation_ops("some-topic", replicas, uuid.uuid4().hex, controller_epoch=12)
    actual = layout.transaction_bytes(ops)
    estimate = layout.estimated_creation_bytes("some-topic", partitions, factor)
    assert actual <= estimate <= actual * 1.2


def test_replication_requests_round_trip():
    partitions = [("a", 0), ("b", 3)]
    assert layout.parse_partition_list(layout.partition_list(partitions)) == partitions
    # An election of every partition names none.
    assert layout.parse_partition_list(layout.partition_list(None)) is None
    targets = {("a", 1): [3, 1], ("a", 0): [2]}
    assert layout.decode(layout.reassignment_request(targets))["partitions"][0] == {
        "topic": "a", "partition": 0, "replicas": [2]}
    assert layout.parse_reassignment(layout.reassignment_request(targets)) == targets
    assert layout.parse_reassignment(None) == {}
    assert layout.parse_controlled_shutdown_reply(layout.controlled_shutdown_reply(0)) == 0
    assert layout.parse_controlled_shutdown_reply(b"") is None
    assert layout.controlled_shutdown_path(3) == "/admin/controlled_shutdown/3"


def test_an_offset_without_metadata_stays_the_papers_decimal_text_and_both_forms_parse():
    assert layout.offset_value(layout.OffsetValue(42)) == b"42"
    assert layout.parse_offset(b"42\n") == 42
    with_metadata = layout.OffsetValue(7, metadata="checkpoint 3", expire_timestamp=1_700_000_000_000)
    data = layout.offset_value(with_metadata)
    assert data.startswith(b"{")
    assert layout.parse_offset_value(data) == with_metadata
    assert layout.parse_offset(data) == 7
    assert layout.parse_offset_value(layout.offset_value(layout.OffsetValue(9, metadata="m"))) == \
        layout.OffsetValue(9, "m", None)


def test_broker_registration_lists_every_listener_as_kafka_does():
    data = json.loads(layout.broker_registration("10.0.0.1", 9093, [
        ("PLAINTEXT", "PLAINTEXT", "10.0.0.1", 9092), ("INTERNAL", "SSL", "10.0.0.1", 9093),
        ("EXTERNAL", "SASL_SSL", "::1", 9094)]))
    assert (data["host"], data["port"], data["version"]) == ("10.0.0.1", 9093, 4)
    assert data["endpoints"] == ["PLAINTEXT://10.0.0.1:9092", "INTERNAL://10.0.0.1:9093", "EXTERNAL://[::1]:9094"]
    assert data["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SSL",
                                                      "EXTERNAL": "SASL_SSL"}
    assert layout.registration_endpoints(data) == {"PLAINTEXT": ("10.0.0.1", 9092), "INTERNAL": ("10.0.0.1", 9093),
                                                   "EXTERNAL": ("::1", 9094)}


def test_registration_endpoints_of_a_plaintext_or_old_registration():
    assert layout.registration_endpoints(json.loads(layout.broker_registration("h", 1))) == {"PLAINTEXT": ("h", 1)}
    assert layout.registration_endpoints({"host": "h", "port": 2}) == {"PLAINTEXT": ("h", 2)}
