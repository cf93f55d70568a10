"""The command line's ZooKeeper side: --zookeeper broker discovery, `cluster`, `consumer-groups`.

The registry znodes are written here through pipeline.zk.layout, the contract brokers and the
ConsumerConnector write to, around one real standalone broker that holds the data.
"""

from __future__ import annotations

import re

import pytest

from pipeline.client import Producer, ProducerData
from pipeline.client.admin import AdminClient
from pipeline.zk import layout
from pipeline.zk.client import connect
from tests.integration.pipeline.test_cli import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, cli, failed, ok
from tests.support import free_port


@pytest.fixture
def zookeeper_registry(zk_connect, broker):
    """A ZooKeeper registry naming the broker (as cluster-mode brokers register) with one consumer group."""
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics(["clicks"], partitions=2)
    with Producer({"metadata.broker.list": broker.bootstrap, "partitioner.class": "pipeline.client.RoundRobinPartitioner"}) as producer:
        for i in range(10):
            producer.send(ProducerData("clicks", None, [b"click %d" % i]))
    zk = connect(zk_connect)
    zk.create(layout.broker_path(0), layout.broker_registration("127.0.0.1", broker.port), makepath=True,
              ephemeral=True)
    zk.create(layout.CONTROLLER, layout.controller_data(0), ephemeral=True)
    zk.create(layout.topic_path("clicks"), layout.topic_assignment({0: [0], 1: [0]}), makepath=True)
    zk.create(layout.consumer_path("etl", "host-a-1"), layout.consumer_registration({"clicks": 1}, "static"),
              makepath=True, ephemeral=True)
    zk.create(layout.owner_path("etl", "clicks", 0), b"host-a-1-0", makepath=True, ephemeral=True)
    zk.create(layout.offset_path("etl", "clicks", 0), b"2", makepath=True)
    zk.create(layout.offset_path("etl", "clicks", 1), b"5", makepath=True)
    yield zk
    zk.stop()
    zk.close()


def test_cluster_from_zookeeper(zk_connect, zookeeper_registry, broker):
    out = ok(cli(None, "--zookeeper", zk_connect, "cluster"))
    assert "Controller: broker 0" in out
    assert f"127.0.0.1:{broker.port}" in out and "controller" in out
    assert "Topics: 1" in out


def test_consumer_groups_list_and_describe_with_lag(zk_connect, zookeeper_registry, broker):
    assert ok(cli(None, "--zookeeper", zk_connect, "consumer-groups", "list")).split() == ["etl"]
    out = ok(cli(None, "--zookeeper", zk_connect, "consumer-groups", "describe", "etl"))
    rows = [line.split() for line in out.splitlines() if line.startswith("clicks")]
    # Ten messages round-robin over two partitions: log end 5 each; committed 2 and 5.
    assert rows == [["clicks", "0", "2", "5", "3", "host-a-1-0"], ["clicks", "1", "5", "5", "0", "-"]]
    assert "host-a-1  clicks: 1" in out


def test_topics_and_consume_find_brokers_through_zookeeper(zk_connect, zookeeper_registry):
    assert "clicks" in ok(cli(None, "--zookeeper", zk_connect, "topics", "list")).split()
    out = ok(cli(None, "--zookeeper", zk_connect, "consume", "clicks", "--from-beginning", "--max-messages", "10"))
    assert sorted(out.split("\n")[:-1]) == sorted(f"click {i}" for i in range(10))


def test_errors(zk_connect, zookeeper_registry):
    failed(cli(None, "--zookeeper", zk_connect, "consumer-groups", "describe", "nope"), EXIT_FAILED,
           "consumer group 'nope' does not exist")
    # Without --zookeeper, list asks the brokers for the groups they coordinate.
    failed(cli("127.0.0.1:1", "consumer-groups", "list"), EXIT_UNREACHABLE, "cannot reach a broker at 127.0.0.1:1")
    failed(cli(None, "--zookeeper", f"127.0.0.1:{free_port()}/x", "--command-timeout-ms", "1000", "cluster"),
           EXIT_UNREACHABLE, "cannot reach ZooKeeper")
    empty = zk_connect.rsplit("/", 1)[0] + "/empty-cluster"
    failed(cli(None, "--zookeeper", empty, "topics", "list"), EXIT_UNREACHABLE, "no broker is registered")


def test_a_consumer_group_end_to_end_on_a_cluster(zk_connect, broker_cluster_factory):
    broker_cluster_factory(zk_connect, size=3)
    zk = ("--zookeeper", zk_connect)
    ok(cli(None, *zk, "topics", "create", "orders", "--partitions", "6"))
    described = ok(cli(None, *zk, "topics", "describe", "orders"))
    leaders = {int(m) for m in re.findall(r"Leader:\s*(\d+)", described)}
    assert leaders == {1, 2, 3}, described
    lines = b"".join(b"k%d\torder %d\n" % (i % 13, i) for i in range(300))
    ok(cli(None, *zk, "produce", "orders", "--key-separator", "\t", "--acks", "1", input_bytes=lines))

    first = ok(cli(None, *zk, "consume", "orders", "--group", "billing", "--from-beginning", "--max-messages", "300"))
    assert sorted(first.splitlines()) == sorted(f"order {i}" for i in range(300))
    rows = [line.split() for line in ok(cli(None, *zk, "consumer-groups", "describe", "billing")).splitlines()
            if line.startswith("orders")]
    assert len(rows) == 6
    assert sum(int(row[2]) for row in rows) == 300 and all(row[4] == "0" for row in rows), rows

    # The group resumes from its committed offsets: only what arrived since is read.
    ok(cli(None, *zk, "produce", "orders", input_bytes=b"".join(b"late %d\n" % i for i in range(10))))
    again = ok(cli(None, *zk, "consume", "orders", "--group", "billing", "--max-messages", "10"))
    assert sorted(again.splitlines()) == sorted(f"late {i}" for i in range(10))
    assert ok(cli(None, *zk, "consumer-groups", "list")).split() == ["billing"]
    cluster = ok(cli(None, *zk, "cluster"))
    assert "Brokers: 3" in cluster and re.search(r"Controller: broker [123]", cluster)


def test_group_option_needs_zookeeper(broker):
    failed(cli(broker.bootstrap, "consume", "t", "--group", "g"), EXIT_USAGE, "--group needs --zookeeper")
