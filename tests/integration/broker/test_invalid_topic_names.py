"""Auto-creating a topic whose name Kafka does not allow: the broker answers INVALID_TOPIC_EXCEPTION (a
permanent error) instead of the retriable UNKNOWN_TOPIC_OR_PARTITION, so a stock producer fails the send at
once instead of retrying until its timeout. Standalone and in a cluster."""

from __future__ import annotations

import socket
import time

from confluent_kafka import KafkaError, Producer

from tests.support import BrokerProcess
from tests.support import wire
from tests.support.cluster import metadata, parse_metadata

INVALID_TOPIC_EXCEPTION = 17
ILLEGAL_NAME = "no spaces in topic names"
MESSAGE_TIMEOUT_MS = 30000


def send_once(bootstrap: str, topic: str) -> tuple[KafkaError | None, float]:
    """Produce one message with librdkafka; (its delivery error, seconds until the delivery report)."""
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": MESSAGE_TIMEOUT_MS})
    started = time.monotonic()
    producer.produce(topic, b"value", on_delivery=lambda error, message: reports.append(error))
    producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 10)
    assert reports, "no delivery report"
    return reports[0], time.monotonic() - started


def check_refused(broker: BrokerProcess) -> None:
    assert metadata(broker, [ILLEGAL_NAME], allow_create=True)["topics"][ILLEGAL_NAME]["error"] == \
        INVALID_TOPIC_EXCEPTION
    error, seconds = send_once(broker.bootstrap, ILLEGAL_NAME)
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, error
    assert seconds < MESSAGE_TIMEOUT_MS / 1000 / 2, f"the send failed only after {seconds:.1f}s"


def test_standalone_auto_create_of_an_illegal_name_is_invalid_topic(broker):
    check_refused(broker)


def test_cluster_auto_create_of_an_illegal_name_is_invalid_topic(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=1)
    check_refused(cluster.brokers[1])


# A Metadata v4 request (correlation id 1, client "repro") auto-creating "evil\n": `$` in the name check matched
# before the final newline, the name reached the registry, its log could not be created, and every later start
# of the standalone broker failed.
TRAILING_NEWLINE_REQUEST = bytes.fromhex("0000001b00030004000000010005726570726f0000000100056576696c0a01")


def metadata_of_trailing_newline(broker: BrokerProcess) -> int:
    """Send the raw request above and the error code of the topic's entry in the answer."""
    with socket.create_connection((broker.host, broker.port), timeout=15) as sock:
        sock.sendall(TRAILING_NEWLINE_REQUEST)
        reader = wire.Reader(wire.read_frame(sock))
    assert reader.int32() == 1
    answer = parse_metadata(reader)
    return answer["topics"]["evil\n"]["error"]


def test_standalone_a_name_with_a_trailing_newline_is_invalid_and_the_broker_restarts(broker):
    for _ in range(50):
        assert metadata_of_trailing_newline(broker) == INVALID_TOPIC_EXCEPTION
    # One line for the client, not one per request (the rest counted in client_errors{kind="invalid_topic_name"}).
    assert broker.log_text().count("not auto-creating topic") == 1
    assert metadata(broker)["topics"] == {}
    broker.restart()
    assert metadata(broker)["topics"] == {}


def test_cluster_a_name_with_a_trailing_newline_is_invalid(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=1)
    assert metadata_of_trailing_newline(cluster.brokers[1]) == INVALID_TOPIC_EXCEPTION
