"""DescribeConfigs (Kafka's API 32) for topics against real brokers, standalone and in a ZooKeeper cluster.

A topic's overrides are reported as DYNAMIC_TOPIC_CONFIG with their values, every other topic config as
the broker's default; stock clients (kafka-python, confluent-kafka) read the same answer as ours; an
unknown topic and a non-topic resource are refused one by one, and the broker keeps serving.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient as ConfluentAdmin, ConfigResource as ConfluentResource
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from pipeline.client.admin import AdminClient
from pipeline.client.errors import UnknownTopicError
from pipeline.protocol.api_keys import ApiKey
from tests.support import wire
from tests.support.cluster import metadata

OVERRIDES = {"retention.ms": "3600000", "segment.bytes": "1048576"}


def kafka_python_describe(bootstrap: str, topic: str) -> dict[str, dict]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-admin", request_timeout_ms=15000)
    try:
        return admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")[
            "topic"][topic]
    finally:
        admin.close()


def confluent_describe(bootstrap: str, resource: ConfluentResource) -> dict:
    admin = ConfluentAdmin({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([resource]).values()
    return future.result(timeout=15)  # while ``admin`` lives: its handle must outlast the answer


def check_topic_configs(bootstrap: str, topic: str) -> None:
    with AdminClient(bootstrap) as admin:
        every = admin.describe_configs(topic)
        assert admin.describe_configs(topic, overrides_only=True) == OVERRIDES
        with pytest.raises(UnknownTopicError):
            admin.describe_configs(f"{topic}-missing")
    assert {name: every[name] for name in OVERRIDES} == OVERRIDES
    assert every["max.message.bytes"].isdigit() and "retention.bytes" in every

    configs = kafka_python_describe(bootstrap, topic)
    assert {name: configs[name]["value"] for name in OVERRIDES} == OVERRIDES
    assert {n for n, c in configs.items() if c["config_source"] == "DYNAMIC_TOPIC_CONFIG"} == set(OVERRIDES)
    assert configs["max.message.bytes"]["config_source"] == "DEFAULT_CONFIG"
    # "never" is Kafka's maximum, not -1 (which flush.messages would refuse if copied to another topic)
    assert configs["flush.messages"]["value"] == str(2**63 - 1)

    entries = confluent_describe(bootstrap, ConfluentResource(ConfluentResource.Type.TOPIC, topic))
    assert {name: entries[name].value for name in OVERRIDES} == OVERRIDES
    assert not entries["retention.ms"].is_default and entries["max.message.bytes"].is_default


def test_standalone_broker_describes_topic_configs(broker_factory):
    broker = broker_factory()
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics("described", partitions=2, configs=OVERRIDES)
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        assert ApiKey.DESCRIBE_CONFIGS in wire.api_versions(conn)
    check_topic_configs(broker.bootstrap, "described")

    (broker_id,) = metadata(broker)["brokers"]
    for resource, code in ((ConfluentResource(ConfluentResource.Type.BROKER, str(broker_id)), "INVALID_REQUEST"),
                           (ConfluentResource(ConfluentResource.Type.TOPIC, "nope"), "UNKNOWN_TOPIC_OR_PART")):
        with pytest.raises(KafkaException) as refused:
            confluent_describe(broker.bootstrap, resource)
        assert refused.value.args[0].name() == code
    # The overrides outlive a restart (they are read back from the broker's registry).
    broker.restart()
    check_topic_configs(broker.bootstrap, "described")


def test_cluster_describes_topic_configs_from_zookeeper(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2)
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics("described", partitions=2, configs=OVERRIDES)
    cluster.wait_for_metadata("described", 2)
    for broker in cluster.live():
        check_topic_configs(broker.bootstrap, "described")
