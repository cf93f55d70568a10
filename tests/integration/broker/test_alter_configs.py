"""AlterConfigs and IncrementalAlterConfigs (Kafka's APIs 33 and 44) for topics, against real brokers.

- stock admin clients (confluent-kafka, kafka-python) change a live topic's configs and the broker applies them to
  its logs at once: a topic switched from delete to compact is cleaned to the latest record of every key, one
  given a small retention.bytes drops its old segments; AlterConfigs replaces the whole set of overrides,
  IncrementalAlterConfigs changes what it names (APPEND to cleanup.policy starts from the value in effect);
  refusals come one by one with Kafka's codes and change nothing; the overrides outlive a restart;
- in a ZooKeeper cluster, `python -m pipeline topics alter --add-config/--delete-config` sent to one broker
  reaches every broker's DescribeConfigs and the logs of the leader and the follower, which roll their segments
  at the new segment.bytes.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient as ConfluentAdmin, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)
from kafka.admin import ConfigResource as KafkaPythonResource, ConfigResourceType, KafkaAdminClient

from pipeline.client.admin import EARLIEST_TIMESTAMP, AdminClient
from tests.integration.pipeline.test_cli import cli, failed, ok
from tests.integration.broker.test_log_compaction import SEGMENT_BYTES, dirt, start_broker, wait_compacted, write_rounds
from tests.support import wait_until
from tests.support.compaction import KeyedWriter, compacted_topic_configs, keyed_batches, read_log, wire_sender
from tests.support.load import produce_batches
from tests.support.wire import KafkaConnection

CLEANER_AND_RETENTION = {"log.retention.check.interval.ms": 200}


def batches(total_bytes: int) -> list[bytes]:
    """Keyed batches of about 4 KiB, ``total_bytes`` in all: several to a SEGMENT_BYTES segment."""
    return list(keyed_batches(total_bytes, keys=100, value_bytes=180, records_per_batch=20))


def incremental(bootstrap: str, topic: str, *entries: tuple[str, AlterConfigOpType, str | None],
                validate_only: bool = False) -> None:
    """confluent-kafka's incremental_alter_configs on one topic; raises KafkaException when refused."""
    admin = ConfluentAdmin({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, op, value in entries])
    (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    future.result(timeout=15)


def refusal(call, *args, **kwargs) -> str:
    """The error name of a confluent-kafka admin call the broker refuses."""
    with pytest.raises(KafkaException) as error:
        call(*args, **kwargs)
    return error.value.args[0].name()


def overrides(bootstrap: str, topic: str) -> dict[str, str]:
    with AdminClient(bootstrap) as admin:
        return admin.describe_configs(topic, overrides_only=True)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # confluent-kafka's AlterConfigs call
def test_stock_clients_alter_a_live_topics_configs_and_its_log_follows(broker_factory):
    topic = "switched"
    broker = start_broker(broker_factory, topic, compacted_topic_configs(SEGMENT_BYTES, policy="delete"),
                          overrides=CLEANER_AND_RETENTION)
    b = broker.bootstrap
    with KafkaConnection(broker.host, broker.port) as conn:
        writer = KeyedWriter(wire_sender(conn, topic), SEGMENT_BYTES)
        write_rounds(writer)
        writer.roll()
        # The topic is not compacted: nothing is cleaned however long we wait, so switch it to compact now.
        incremental(b, topic, ("cleanup.policy", AlterConfigOpType.SET, "compact"))
        assert overrides(b, topic)["cleanup.policy"] == "compact"
        wait_compacted(lambda: read_log(conn, topic), writer, dirt(writer))

    # Refusals, one by one, each leaving the overrides as they were.
    before = overrides(b, topic)
    assert refusal(incremental, b, topic, ("retention.ms", AlterConfigOpType.SET, "soon")) == "INVALID_CONFIG"
    assert refusal(incremental, b, topic, ("no.such.config", AlterConfigOpType.SET, "1")) == "INVALID_CONFIG"
    assert refusal(incremental, b, topic, ("retention.ms", AlterConfigOpType.APPEND, "5")) == "INVALID_CONFIG"
    assert refusal(incremental, b, "absent", ("retention.ms", AlterConfigOpType.SET, "5")) == "UNKNOWN_TOPIC_OR_PART"
    incremental(b, topic, ("retention.ms", AlterConfigOpType.SET, "5"), validate_only=True)
    admin = ConfluentAdmin({"bootstrap.servers": b})
    (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "5", incremental_operation=AlterConfigOpType.SET)])]).values()
    assert refusal(future.result, timeout=15) == "INVALID_REQUEST"
    assert overrides(b, topic) == before

    # APPEND starts from the value in effect; DELETE goes back to the broker's default.
    incremental(b, topic, ("cleanup.policy", AlterConfigOpType.APPEND, "delete"),
                ("file.delete.delay.ms", AlterConfigOpType.DELETE, None))
    after = overrides(b, topic)
    assert after["cleanup.policy"] == "compact,delete" and "file.delete.delay.ms" not in after

    # kafka-python changes what it names (IncrementalAlterConfigs, since the broker has it) ...
    kafka_python = KafkaAdminClient(bootstrap_servers=b, client_id="test-admin", request_timeout_ms=15000)
    try:
        kafka_python.alter_configs([KafkaPythonResource(ConfigResourceType.TOPIC, topic, configs={
            "retention.bytes": str(SEGMENT_BYTES), "file.delete.delay.ms": "0"})])
    finally:
        kafka_python.close()
    assert overrides(b, topic) == {**after, "retention.bytes": str(SEGMENT_BYTES), "file.delete.delay.ms": "0"}
    # ... and confluent-kafka's alter_configs (AlterConfigs) replaces the whole set: retention, no compaction.
    replaced = {"retention.bytes": str(SEGMENT_BYTES), "segment.bytes": str(SEGMENT_BYTES), "file.delete.delay.ms": "0"}
    (future,) = admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic, set_config=replaced)]).values()
    future.result(timeout=15)
    assert overrides(b, topic) == replaced
    produce_batches(broker.host, broker.port, topic, batches(6 * SEGMENT_BYTES))
    # Retention (delete again, compact no more) drops every segment but the newest one or two. A check that ran
    # while the batches were still arriving may already have moved the log start; the next one trims the rest.
    with AdminClient(b) as admin:
        assert wait_until(lambda: (admin.list_offsets(topic, timestamp=EARLIEST_TIMESTAMP)[0] or 0) > writer.end_offset,
                          20, message="retention.bytes applied: the log start passed the records written before")
    wait_until(lambda: len(broker.segment_files(topic, 0)) <= 3, 20,
               message=lambda: f"retention.bytes left one or two segments: {broker.segment_files(topic, 0)}")

    broker.restart()
    assert overrides(b, topic) == replaced


def test_cli_alters_configs_on_every_broker_of_a_cluster(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2)
    topic = "replicated"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics(topic, partitions=1, replication_factor=2, configs={"retention.ms": "3600000"})
    cluster.wait_for_metadata(topic, 1)
    first, second = cluster.live()

    shown = ok(cli(first.bootstrap, "topics", "alter", topic, "--add-config", f"segment.bytes={SEGMENT_BYTES}",
                   "--delete-config", "retention.ms"))
    assert shown.strip() == f"Topic {topic} now overrides: segment.bytes={SEGMENT_BYTES}."
    for broker in (first, second):
        assert wait_until(lambda: overrides(broker.bootstrap, topic) == {"segment.bytes": str(SEGMENT_BYTES)}, 10)
    assert f"Configs: segment.bytes={SEGMENT_BYTES}" in ok(cli(second.bootstrap, "topics", "describe", topic))

    # Leader and follower both roll at the new size.
    leader = cluster.brokers[cluster.partition_state(topic, 0)["leader"]]
    produce_batches(leader.host, leader.port, topic, batches(8 * SEGMENT_BYTES))
    for broker in (first, second):
        assert wait_until(lambda: len(broker.segment_files(topic, 0)) >= 6, 20,
                          message=lambda: f"{broker}: {broker.segment_files(topic, 0)}")

    failed(cli(first.bootstrap, "topics", "alter", topic, "--add-config", "segment.bytes=1"), 1, "INVALID_CONFIG")
    failed(cli(first.bootstrap, "topics", "alter", topic, "--add-config", "retention.ms=1", "--partitions", "3"), 2,
           "give one of")
    ok(cli(first.bootstrap, "topics", "alter", topic, "--delete-config", "segment.bytes"))
    assert wait_until(lambda: overrides(second.bootstrap, topic) == {}, 10)
