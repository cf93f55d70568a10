"""`consumer-groups` on both kinds of group. A paper (ZooKeeper) group: --reset-offsets and --delete write its
znodes through pipeline.zk.layout, around a real broker holding the data, and are refused while a consumer is
registered. A broker-coordinated group of a real librdkafka consumer: --list, --describe (members, lag),
--reset-offsets and --delete through its coordinator, the last two refused while the consumer is in the group."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoNodeError

from pipeline.client import Producer, ProducerData
from pipeline.client.admin import AdminClient
from pipeline.client.group_admin import OffsetAndMetadata
from pipeline.zk import layout
from pipeline.zk.client import connect
from tests.integration.pipeline.test_cli import EXIT_FAILED, cli, failed, ok
from tests.support.polling import wait_until

# Brokers for group tests: short session timeouts allowed, no wait for more members before the first rebalance.
GROUP_BROKER = {"group.min.session.timeout.ms": 1000, "group.initial.rebalance.delay.ms": 0}


def two_partitions_of_five(bootstrap: str, topic: str) -> None:
    """``topic`` with 2 partitions holding 5 messages each."""
    with AdminClient(bootstrap) as admin:
        admin.create_topics([topic], partitions=2)
    with Producer({"metadata.broker.list": bootstrap,
                   "partitioner.class": "pipeline.client.RoundRobinPartitioner"}) as producer:
        for i in range(10):
            producer.send(ProducerData(topic, None, [b"%s %d" % (topic.encode(), i)]))


@pytest.fixture
def paper_group(zk_connect, broker):
    """Group "etl" in ZooKeeper with committed offsets 2 and 5 on clicks (log ends 5 and 5), no member."""
    two_partitions_of_five(broker.bootstrap, "clicks")
    zk = connect(zk_connect)
    zk.create(layout.broker_path(0), layout.broker_registration("127.0.0.1", broker.port), makepath=True,
              ephemeral=True)
    zk.create(layout.topic_path("clicks"), layout.topic_assignment({0: [0], 1: [0]}), makepath=True)
    zk.create(layout.offset_path("etl", "clicks", 0), b"2", makepath=True)
    zk.create(layout.offset_path("etl", "clicks", 1), b"5", makepath=True)
    yield zk
    zk.stop()
    zk.close()


def committed(zk, group: str = "etl") -> list[int]:
    return [layout.parse_offset(zk.get(layout.offset_path(group, "clicks", p))[0]) for p in (0, 1)]


def plan_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.startswith("etl ")]


def test_reset_offsets_of_a_paper_group(zk_connect, paper_group):
    zk = ("--zookeeper", zk_connect)
    dry = ok(cli(None, *zk, "consumer-groups", "--reset-offsets", "--group", "etl", "--topic", "clicks",
                 "--to-earliest"))
    assert plan_rows(dry) == [["etl", "clicks", "0", "0"], ["etl", "clicks", "1", "0"]]
    # No message is that recent: the log end, as Kafka resets to a time after the newest message.
    future = ok(cli(None, *zk, "consumer-groups", "--reset-offsets", "--group", "etl", "--all-topics",
                    "--to-datetime", "2999-01-01T00:00:00.000", "--dry-run"))
    assert plan_rows(future) == [["etl", "clicks", "0", "5"], ["etl", "clicks", "1", "5"]]
    assert committed(paper_group) == [2, 5]

    ok(cli(None, *zk, "consumer-groups", "reset-offsets", "--group", "etl", "--all-topics", "--shift-by", "-3",
           "--execute"))
    assert committed(paper_group) == [0, 2]
    ok(cli(None, *zk, "consumer-groups", "--reset-offsets", "--group", "etl", "--topic", "clicks:1",
           "--to-offset", "4", "--execute"))
    assert committed(paper_group) == [0, 4]
    described = ok(cli(None, *zk, "consumer-groups", "--describe", "--group", "etl"))
    assert [line.split()[:5] for line in described.splitlines() if line.startswith("clicks")] == [
        ["clicks", "0", "0", "5", "5"], ["clicks", "1", "4", "5", "1"]]


def test_a_paper_group_with_a_consumer_is_neither_reset_nor_deleted_then_deleted_once_empty(zk_connect, paper_group):
    zk = ("--zookeeper", zk_connect)
    member = paper_group.create(layout.consumer_path("etl", "host-a-1"),
                                layout.consumer_registration({"clicks": 1}, "static"), makepath=True, ephemeral=True)
    failed(cli(None, *zk, "consumer-groups", "--reset-offsets", "--group", "etl", "--topic", "clicks",
               "--to-latest", "--execute"), EXIT_FAILED, "can only be reset if the group 'etl' is inactive")
    failed(cli(None, *zk, "consumer-groups", "--delete", "--group", "etl"), EXIT_FAILED, "NON_EMPTY_GROUP")
    assert committed(paper_group) == [2, 5]

    paper_group.delete(member)
    assert "was successful" in ok(cli(None, *zk, "consumer-groups", "delete", "--group", "etl"))
    with pytest.raises(NoNodeError):
        paper_group.get(layout.group_path("etl"))
    assert ok(cli(None, *zk, "consumer-groups", "--list")).split() == []


def table_rows(out: str, first: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.startswith(first + " ")]


def test_a_broker_group_listed_described_reset_and_deleted(broker_factory):
    from confluent_kafka import Consumer

    broker = broker_factory(overrides=GROUP_BROKER)
    two_partitions_of_five(broker.bootstrap, "orders")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "shop", "client.id": "shop-client",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe(["orders"])
        consumed = []

        def read_all() -> bool:
            consumed.extend(m for m in consumer.consume(10, timeout=0.2) if m.error() is None)
            return len(consumed) >= 10

        wait_until(read_all, timeout=30, message="the group consumer to read 10 messages")
        consumer.commit(asynchronous=False)

        assert "shop" in ok(cli(broker.bootstrap, "consumer-groups", "--list")).split()
        described = ok(cli(broker.bootstrap, "consumer-groups", "--describe", "--group", "shop"))
        assert "state Stable" in described and "coordinator broker" in described
        rows = table_rows(described, "orders")
        assert [row[:5] for row in rows] == [["orders", "0", "5", "5", "0"], ["orders", "1", "5", "5", "0"]]
        assert {row[-1] for row in rows} == {"shop-client"}
        with AdminClient(broker.bootstrap) as admin:
            [group] = admin.describe_groups("shop")
        [member] = group.members
        assert member.subscription["topics"] == ["orders"] and member.assignment == (("orders", 0), ("orders", 1))

        failed(cli(broker.bootstrap, "consumer-groups", "--reset-offsets", "--group", "shop", "--topic", "orders",
                   "--to-earliest", "--execute"), EXIT_FAILED, "can only be reset if the group 'shop' is inactive")
        failed(cli(broker.bootstrap, "consumer-groups", "--delete", "--group", "shop"), EXIT_FAILED,
               "NON_EMPTY_GROUP")
    finally:
        consumer.close()

    ok(cli(broker.bootstrap, "consumer-groups", "--reset-offsets", "--group", "shop", "--topic", "orders:0",
           "--to-earliest", "--execute"))
    ok(cli(broker.bootstrap, "consumer-groups", "--reset-offsets", "--group", "shop", "--topic", "orders:1",
           "--shift-by", "-2", "--execute"))
    with AdminClient(broker.bootstrap) as admin:
        assert {tp: o.offset for tp, o in admin.fetch_offsets("shop").items()} == {("orders", 0): 0, ("orders", 1): 3}
    described = ok(cli(broker.bootstrap, "consumer-groups", "describe", "shop"))
    assert "has no active members" in described
    assert [row[:5] for row in table_rows(described, "orders")] == [
        ["orders", "0", "0", "5", "5"], ["orders", "1", "3", "5", "2"]]

    assert "was successful" in ok(cli(broker.bootstrap, "consumer-groups", "--delete", "--group", "shop"))
    failed(cli(broker.bootstrap, "consumer-groups", "--delete", "--group", "shop"), EXIT_FAILED,
           "GROUP_ID_NOT_FOUND")
    failed(cli(broker.bootstrap, "consumer-groups", "--describe", "--group", "shop"), EXIT_FAILED,
           "consumer group 'shop' does not exist")


def test_broker_groups_of_a_cluster_share_the_zookeeper_namespace(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2, overrides=GROUP_BROKER)
    two_partitions_of_five(cluster.bootstrap, "orders")
    groups = [f"g-{i}" for i in range(4)]
    first = f"127.0.0.1:{cluster.live()[0].port}"
    with AdminClient(first) as admin:
        coordinators = {group: admin.find_coordinator(group) for group in groups}
        for n, group in enumerate(groups):
            admin.commit_offsets(group, {("orders", 0): n, ("orders", 1): n + 1})
        assert admin.fetch_offsets(groups[3]) == {("orders", 0): OffsetAndMetadata(3),
                                                  ("orders", 1): OffsetAndMetadata(4)}
    # The placement spreads these groups over both brokers, so some calls went past the bootstrap broker.
    assert set(coordinators.values()) == {1, 2}, coordinators
    zk = connect(zk_connect)
    try:
        assert layout.parse_offset(zk.get(layout.offset_path("g-2", "orders", 1))[0]) == 3

        zk_option = ("--zookeeper", zk_connect)
        assert ok(cli(None, *zk_option, "consumer-groups", "--list")).split() == groups
        described = ok(cli(None, *zk_option, "consumer-groups", "--describe", "--group", "g-1"))
        assert f"coordinator broker {coordinators['g-1']}" in described and "has no active members" in described
        ok(cli(None, *zk_option, "consumer-groups", "--reset-offsets", "--group", "g-1", "--all-topics",
               "--to-latest", "--execute"))
        assert layout.parse_offset(zk.get(layout.offset_path("g-1", "orders", 0))[0]) == 5
        ok(cli(None, *zk_option, "consumer-groups", "--delete", "--group", "g-1"))
        assert zk.exists(layout.group_path("g-1")) is None
    finally:
        zk.stop()
        zk.close()
