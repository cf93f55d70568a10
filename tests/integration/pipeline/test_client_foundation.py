"""BrokerConnection and Cluster against real brokers: negotiation, pipelining, failures, metadata."""

from __future__ import annotations

import pytest

from pipeline.client import BrokerConnection, Cluster, KafkaConnectionError, NoBrokersAvailable, StaticBrokerList
from pipeline.client.cluster import parse_broker_list
from pipeline.client.errors import UnknownTopicError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import SUPPORTED_VERSIONS
from tests.support.ports import free_port


def test_negotiates_the_highest_common_versions(broker):
    with BrokerConnection("127.0.0.1", broker.port) as connection:
        assert connection.versions[ApiKey.FETCH] == SUPPORTED_VERSIONS[ApiKey.FETCH][1]
        assert connection.versions[ApiKey.PRODUCE] == SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]
        assert connection.broker_versions[ApiKey.API_VERSIONS][1] >= 3


def test_pipelined_requests_come_back_in_order(broker):
    with BrokerConnection("127.0.0.1", broker.port) as connection:
        sent = [connection.send(ApiKey.METADATA, {"topics": None}) for _ in range(50)]
        assert connection.in_flight == 50
        received = [connection.receive()[0] for _ in range(50)]
        assert received == sent
        assert connection.in_flight == 0


def test_unreachable_broker_is_a_clear_retriable_error():
    port = free_port()
    with pytest.raises(KafkaConnectionError, match=f"cannot connect to broker 127.0.0.1:{port}") as info:
        BrokerConnection("127.0.0.1", port, timeout_s=2).connect()
    assert info.value.retriable
    with pytest.raises(NoBrokersAvailable):
        Cluster(StaticBrokerList(f"127.0.0.1:{port}"), timeout_s=2).refresh()


def test_broker_restart_breaks_the_connection_then_reconnect_works(broker):
    connection = BrokerConnection("127.0.0.1", broker.port, timeout_s=10)
    connection.connect()
    broker.restart()
    with pytest.raises(KafkaConnectionError):
        connection.request(ApiKey.METADATA, {"topics": None})
    assert not connection.connected
    connection.connect()
    assert connection.request(ApiKey.METADATA, {"topics": None})["brokers"][0]["port"] == broker.port
    connection.close()


def test_cluster_metadata_topics_and_leaders(broker):
    cluster = Cluster(StaticBrokerList(f"127.0.0.1:{broker.port}"))
    try:
        assert cluster.brokers() == {0: ("127.0.0.1", broker.port)}
        with pytest.raises(UnknownTopicError):
            cluster.partitions_for("absent")
        assert cluster.partitions_for("created-on-demand", allow_auto_create=True) == [0]
        assert cluster.leader("created-on-demand", 0) == 0
        connection = cluster.leader_connection("created-on-demand", 0)
        assert connection is cluster.connection(0)
        assert "created-on-demand" in cluster.topics()
        # After a restart the pooled connection is broken; invalidate() lets the next use recover.
        broker.restart()
        cluster.invalidate(0)
        assert cluster.leader_connection("created-on-demand", 0).request(ApiKey.METADATA, {"topics": []})
    finally:
        cluster.close()


@pytest.mark.parametrize("text, expected", [
    ("a:1", [("a", 1)]),
    ("a:1, b:2", [("a", 1), ("b", 2)]),
    ("0:a:1", [("a", 1)]),
    ("[::1]:9092", [("::1", 9092)]),
])
def test_broker_list_parsing(text, expected):
    assert parse_broker_list(text) == expected


@pytest.mark.parametrize("text", ["", "nohost", "a:b"])
def test_bad_broker_lists(text):
    with pytest.raises(ValueError):
        parse_broker_list(text)
