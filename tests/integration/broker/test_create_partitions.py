"""CreatePartitions (Kafka's API 37) against real brokers: standalone and in a ZooKeeper cluster.

New partitions get leaders and take produce and fetch, the existing partitions keep their data, refusals
carry Kafka's error codes, validate_only changes nothing, and the new partitions survive a restart.
"""

from __future__ import annotations

import os
import signal

import pytest
from kafka.admin import KafkaAdminClient

from pipeline.client.admin import AdminClient
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.records import decode_records, encode_batch
from pipeline.zk import layout
from tests.support import BrokerProcess, wire
from tests.support.clients import create_topic
from tests.support.codec_client import Client
from tests.support.polling import wait_until
from tests.support.cluster import BrokerCluster, metadata


def produce(broker: BrokerProcess, topic: str, partition: int, values: list[bytes]) -> int:
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        result = wire.produce(conn, topic, partition, encode_batch(values))
    assert result.error_code == 0, f"produce to {topic}-{partition}: error {result.error_code}"
    return result.base_offset


def fetch(broker: BrokerProcess, topic: str, partition: int) -> list[bytes]:
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        result = wire.fetch(conn, topic, partition, 0, max_wait_ms=0)
    assert result.error_code == 0, f"fetch {topic}-{partition}: error {result.error_code}"
    return [r.value for r in decode_records(result.records)[0]]


def kafka_python_grow(bootstrap: str, request: dict, validate_only: bool = False) -> dict[str, int]:
    """Send CreatePartitions with kafka-python's admin client; topic -> error code."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-admin", request_timeout_ms=15000)
    try:
        response = admin.create_partitions(request, timeout_ms=10000, validate_only=validate_only,
                                           raise_errors=False)
    finally:
        admin.close()
    return {result.name: result.error_code for result in response.results}


def test_standalone_broker_grows_a_topic(broker_factory):
    broker = broker_factory()
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        assert ApiKey.CREATE_PARTITIONS in wire.api_versions(conn)
    create_topic(broker.bootstrap, "grow", partitions=2)
    (me,) = metadata(broker)["brokers"]
    for p in range(2):
        produce(broker, "grow", p, [f"old-{p}-{i}".encode() for i in range(3)])

    assert kafka_python_grow(broker.bootstrap, {"grow": 4}, validate_only=True) == {"grow": ErrorCode.NONE}
    assert len(metadata(broker, ["grow"])["topics"]["grow"]["partitions"]) == 2

    assert kafka_python_grow(broker.bootstrap, {"grow": 4}) == {"grow": ErrorCode.NONE}
    partitions = metadata(broker, ["grow"])["topics"]["grow"]["partitions"]
    assert {p: v["leader"] for p, v in partitions.items()} == {p: me for p in range(4)}
    for p in (2, 3):
        assert broker.partition_dir("grow", p).is_dir()
        assert produce(broker, "grow", p, [f"new-{p}".encode()]) == 0

    assert kafka_python_grow(broker.bootstrap, {"grow": 4, "grow-missing": 2, "grow-less": 1}) == {
        "grow": ErrorCode.INVALID_PARTITIONS, "grow-missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "grow-less": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert kafka_python_grow(broker.bootstrap, {"grow": 3}) == {"grow": ErrorCode.INVALID_PARTITIONS}
    bad_assignments = [{"count": 6, "assignments": [[me]]},
                       {"count": 5, "assignments": [[me + 7]]},
                       {"count": 5, "assignments": [[me, me]]}]
    for request in bad_assignments:
        assert kafka_python_grow(broker.bootstrap, {"grow": request}) == {"grow": ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert kafka_python_grow(broker.bootstrap, {"grow": {"count": 5, "assignments": [[me]]}}) == {
        "grow": ErrorCode.NONE}

    broker.restart()
    assert len(metadata(broker, ["grow"])["topics"]["grow"]["partitions"]) == 5
    for p in range(2):
        assert fetch(broker, "grow", p) == [f"old-{p}-{i}".encode() for i in range(3)]
    for p in (2, 3):
        assert fetch(broker, "grow", p) == [f"new-{p}".encode()]
    assert fetch(broker, "grow", 4) == []


def test_cluster_grows_a_topic_through_the_controller(zk_connect, broker_cluster_factory):
    cluster: BrokerCluster = broker_cluster_factory(zk_connect)
    create_topic(cluster.brokers[1].bootstrap, "spread", partitions=2)
    before = cluster.wait_for_metadata("spread", 2)
    for p, leader in before.items():
        produce(cluster.brokers[leader], "spread", p, [f"old-{p}".encode()])

    with AdminClient(cluster.brokers[2].bootstrap) as admin:
        admin.create_partitions("spread", 5)
    assignment = cluster.assignment("spread")
    assert sorted(assignment) == list(range(5))
    assert {p: assignment[p] for p in before} == {p: [leader] for p, leader in before.items()}
    leaders = cluster.wait_for_metadata("spread", 5)
    assert {p: leaders[p] for p in before} == before
    # Round-robin continues where the existing partitions left off: the five spread over all brokers.
    assert set(leaders.values()) == {1, 2, 3}
    for p in range(2, 5):
        assert cluster.partition_state("spread", p)["leader"] == assignment[p][0] == leaders[p]
        assert produce(cluster.brokers[leaders[p]], "spread", p, [f"new-{p}".encode()]) == 0

    # A manual assignment puts the new partition on the named broker; kafka-python sends it.
    assert kafka_python_grow(cluster.bootstrap, {"spread": {"count": 6, "assignments": [[3]]}}) == {
        "spread": ErrorCode.NONE}
    assert cluster.wait_for_metadata("spread", 6)[5] == 3
    assert kafka_python_grow(cluster.bootstrap, {"spread": {"count": 7, "assignments": [[9]]}}) == {
        "spread": ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert kafka_python_grow(cluster.bootstrap, {"spread": {"count": 7, "assignments": [[1, 2]]}}) == {
        "spread": ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    # More partitions than the topic's znode can describe within ZooKeeper's request limit.
    assert kafka_python_grow(cluster.bootstrap, {"spread": 1_000_000}) == {"spread": ErrorCode.INVALID_PARTITIONS}
    assert kafka_python_grow(cluster.bootstrap, {"spread": 6, "nowhere": 3}) == {
        "spread": ErrorCode.INVALID_PARTITIONS, "nowhere": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert kafka_python_grow(cluster.bootstrap, {"spread": 9}, validate_only=True) == {"spread": ErrorCode.NONE}
    assert sorted(cluster.assignment("spread")) == list(range(6))
    with AdminClient(cluster.bootstrap) as admin:
        with pytest.raises(KafkaProtocolError) as refused:
            admin.create_partitions({"spread": 2})
    assert refused.value.code == ErrorCode.INVALID_PARTITIONS
    # While the controller cannot act a request times out (flexible v3, our codec); the growth stays written
    # and the controller carries it out once it runs again.
    # A topic queued for deletion is refused as Kafka does (INVALID_TOPIC_EXCEPTION).
    create_topic(cluster.bootstrap, "doomed", partitions=1)
    cluster.wait_for_metadata("doomed", 1)
    controller = cluster.controller_id()
    other = next(b for i, b in cluster.brokers.items() if i != controller)
    os.kill(cluster.brokers[controller].pid, signal.SIGSTOP)
    try:
        cluster.zk.create(layout.delete_topic_request_path("doomed"))
        client = Client(other.port)
        try:
            response = client.call(ApiKey.CREATE_PARTITIONS, 3, {
                "topics": [{"name": "spread", "count": 7, "assignments": None},
                           {"name": "doomed", "count": 2, "assignments": None}],
                "timeout_ms": 500, "validate_only": False})
        finally:
            client.close()
    finally:
        os.kill(cluster.brokers[controller].pid, signal.SIGCONT)
    assert [(r["name"], r["error_code"]) for r in response["results"]] == [
        ("spread", ErrorCode.REQUEST_TIMED_OUT), ("doomed", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    cluster.wait_for_metadata("spread", 7)
    wait_until(lambda: "doomed" not in metadata(other)["topics"], 30, message="the queued deletion carried out")

    # A restart of the whole cluster keeps the partitions, their leaders and their data.
    cluster.stop()
    cluster.start()
    leaders = cluster.wait_for_metadata("spread", 7)
    for p, leader in leaders.items():
        expected = [f"old-{p}".encode()] if p < 2 else [f"new-{p}".encode()] if p < 5 else []
        assert fetch(cluster.brokers[leader], "spread", p) == expected


def test_confluent_kafka_grows_a_topic(broker_factory):
    from confluent_kafka.admin import AdminClient as ConfluentAdmin, NewPartitions

    broker = broker_factory()
    create_topic(broker.bootstrap, "grow-rd", partitions=1)
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions("grow-rd", 3)], request_timeout=15)["grow-rd"].result(timeout=15)
    assert len(metadata(broker, ["grow-rd"])["topics"]["grow-rd"]["partitions"]) == 3
    refused = admin.create_partitions([NewPartitions("grow-rd", 2)], request_timeout=15)["grow-rd"].exception(timeout=15)
    assert refused is not None and refused.args[0].code() == ErrorCode.INVALID_PARTITIONS
