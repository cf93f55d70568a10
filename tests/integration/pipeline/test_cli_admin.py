"""AdminClient (the library behind `python -m pipeline topics/offsets`) against a real broker."""

from __future__ import annotations

import pytest

from pipeline.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.errors import NoBrokersAvailable, UnknownTopicError
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from tests.support import BrokerProcess, free_port
from tests.support.clients import run_kcat


def test_create_describe_list_delete(broker: BrokerProcess) -> None:
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics("orders", 3, configs={"retention.ms": "60000"})
        admin.create_topics(["a", "b"], 1)
        assert admin.list_topics() == ["a", "b", "orders"]
        (orders,) = admin.describe_topics(["orders"])
        assert orders.name == "orders" and orders.replication_factor == 1
        assert [(p.partition, p.leader, p.replicas, p.isr) for p in orders.partitions] == [
            (0, 0, [0], [0]), (1, 0, [0], [0]), (2, 0, [0], [0])]
        assert [d.name for d in admin.describe_topics()] == ["a", "b", "orders"]
        admin.delete_topics(["a", "b"])
        assert admin.list_topics() == ["orders"]
        with pytest.raises(UnknownTopicError):
            admin.describe_topics(["a"])


def test_create_partitions_grows_topics(broker: BrokerProcess) -> None:
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics(["grow", "also"], 1)
        admin.create_partitions("grow", 3)
        assert [len(d.partitions) for d in admin.describe_topics(["grow"])] == [3]
        admin.create_partitions({"grow": 4, "also": 2}, validate_only=True)
        admin.create_partitions({"grow": 4, "also": 2})
        assert [len(d.partitions) for d in admin.describe_topics(["also", "grow"])] == [2, 4]
        with pytest.raises(KafkaProtocolError) as error:
            admin.create_partitions("grow", 4)
        assert error.value.code == ErrorCode.INVALID_PARTITIONS and "already has 4" in error.value.message
        with pytest.raises(UnknownTopicError):
            admin.create_partitions("never-created", 2)
        with pytest.raises(TypeError):
            admin.create_partitions("grow")


@pytest.mark.parametrize("kwargs, code", [
    ({"names": "dup", "partitions": 1}, ErrorCode.TOPIC_ALREADY_EXISTS),
    ({"names": "zero", "partitions": 0}, ErrorCode.INVALID_PARTITIONS),
    ({"names": "wide", "partitions": 1, "replication_factor": 2}, ErrorCode.INVALID_REPLICATION_FACTOR),
    ({"names": "odd", "partitions": 1, "configs": {"no.such": "1"}}, ErrorCode.INVALID_CONFIG),
])
def test_refusals_carry_the_brokers_code_and_message(broker: BrokerProcess, kwargs: dict, code: ErrorCode) -> None:
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics("dup", 1)
        with pytest.raises(KafkaProtocolError) as error:
            admin.create_topics(**kwargs)
        assert error.value.code == code and error.value.message
        with pytest.raises(UnknownTopicError):
            admin.delete_topics("never-created")


def test_list_offsets_per_partition(broker: BrokerProcess) -> None:
    cluster = Cluster(StaticBrokerList(broker.bootstrap))
    admin = AdminClient(cluster)
    try:
        admin.create_topics("offs", 2)
        run_kcat(["-b", broker.bootstrap, "-P", "-t", "offs", "-p", "1"], input_bytes=b"x\ny\nz\n")
        assert admin.list_offsets("offs") == {0: 0, 1: 3}
        assert admin.list_offsets("offs", [1], EARLIEST_TIMESTAMP) == {1: 0}
        assert admin.list_offsets("offs", [1], LATEST_TIMESTAMP) == {1: 3}
        assert admin.list_offsets("offs", [1], 2**62) == {1: None}
        with pytest.raises(KafkaProtocolError) as error:
            admin.list_offsets("offs", [2])
        assert error.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        admin.close()
        # A shared cluster stays open after the admin client closes.
        assert cluster.topics()
        cluster.close()


def test_unreachable_cluster() -> None:
    with AdminClient(f"127.0.0.1:{free_port()}", timeout_s=2) as admin:
        with pytest.raises(NoBrokersAvailable):
            admin.list_topics()
