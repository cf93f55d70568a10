"""`consumer-groups --reset-offsets` and `--delete` on a paper (ZooKeeper) group: the offset znodes written
through pipeline.zk.layout, around a real broker holding the data, refused while a consumer is registered."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoNodeError

from pipeline.client import Producer, ProducerData
from pipeline.client.admin import AdminClient
from pipeline.zk import layout
from pipeline.zk.client import connect
from tests.integration.test_cli import EXIT_FAILED, cli, failed, ok


@pytest.fixture
def paper_group(zk_connect, broker):
    """Group "etl" in ZooKeeper with committed offsets 2 and 5 on clicks (log ends 5 and 5), no member."""
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics(["clicks"], partitions=2)
    with Producer({"metadata.broker.list": broker.bootstrap,
                   "partitioner.class": "pipeline.client.RoundRobinPartitioner"}) as producer:
        for i in range(10):
            producer.send(ProducerData("clicks", None, [b"click %d" % i]))
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
