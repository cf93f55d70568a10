"""Our clients against a Kafka server we did not write: librdkafka's mock cluster.

A confluent-kafka client configured with ``test.mock.num.brokers`` starts a three-broker mock cluster
in its own process. It answers our ApiVersions v3 (newer than the v2 it speaks) in a layout of its
own: error 35, a compact array count of 0 followed by one uncounted v0-style entry for ApiVersions
0-2, then a throttle time. Our connection cannot decode that, so it falls back to v0, as librdkafka
does; then our Producer, SimpleConsumer and Consumer work against it.
"""

from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka import Producer as ConfluentProducer

from pipeline.client import BrokerConnection, Consumer, FetchRequest, Producer, ProducerData, SimpleConsumer
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import encode_request
from pipeline.protocol.errors import ErrorCode
from tests.support.wire import read_frame

TOPIC = "mocked"
COUNT = 40


@pytest.fixture
def mock_cluster():
    """The mock cluster's brokers {node id: (host, port)}; it lives as long as the client hosting it."""
    host = ConfluentProducer({"test.mock.num.brokers": 3, "log_level": 3})
    brokers = {b.id: (b.host, b.port) for b in host.list_topics(timeout=10).brokers.values()}
    assert len(brokers) == 3
    yield host, brokers
    host.flush(10)


def test_the_mock_answers_api_versions_v3_in_a_layout_of_its_own(mock_cluster):
    _, brokers = mock_cluster
    host, port = brokers[min(brokers)]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, 99, "probe",
                                    {"client_software_name": "probe", "client_software_version": "1"}))
        frame = read_frame(sock)
    correlation_id, error_code, compact_count = struct.unpack_from(">ihB", frame)
    assert (correlation_id, error_code, compact_count) == (99, ErrorCode.UNSUPPORTED_VERSION, 1)
    assert struct.unpack_from(">hhh", frame, 7) == (ApiKey.API_VERSIONS, 0, 2)  # an entry the count leaves out


def test_our_clients_work_against_the_mock_cluster(mock_cluster):
    confluent, brokers = mock_cluster
    host, port = brokers[min(brokers)]
    with BrokerConnection(host, port) as conn:
        assert conn.versions[ApiKey.API_VERSIONS] == 2 and ApiKey.PRODUCE in conn.versions

    bootstrap = ",".join(f"{h}:{p}" for h, p in brokers.values())
    sent = {b"key-%d" % i: b"value %d" % i for i in range(COUNT)}
    with Producer({"metadata.broker.list": bootstrap, "request.required.acks": 1}) as producer:
        for key, value in sent.items():
            producer.send(ProducerData(TOPIC, key, [value]))

    partitions = confluent.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    fetched = {}
    for index, metadata in partitions.items():
        simple = SimpleConsumer(*brokers[metadata.leader])
        try:
            offset = 0
            while True:  # the mock answers a fetch with one batch at a time
                message_set = simple.fetch(FetchRequest(TOPIC, index, offset, 64 * 1024))
                got = [(bytes(m.key), bytes(m.value)) for m in message_set]
                if not got:
                    break
                fetched.update(got)
                offset = message_set.next_offset
        finally:
            simple.close()
    assert fetched == sent

    consumer = Consumer({"metadata.broker.list": bootstrap, "consumer.timeout.ms": 10_000,
                         "auto.offset.reset": "smallest"}, topics=[TOPIC])
    consumed = {}
    try:
        for record in consumer:
            consumed[bytes(record.key)] = bytes(record.value)
            if len(consumed) == COUNT:
                break
    finally:
        consumer.close()
    assert consumed == sent
