"""ZooKeeperBrokerDiscovery answers metadata again from what it read while no watch fired, and reads anew after."""

from __future__ import annotations

from kazoo.client import KazooClient

from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
from pipeline.zk import layout
from tests.support.polling import wait_until


def _register(zk: KazooClient) -> None:
    zk.create(layout.broker_path(1), layout.broker_registration("127.0.0.1", 9101), makepath=True)
    zk.create(layout.broker_path(2), layout.broker_registration("127.0.0.1", 9102), makepath=True)
    zk.create(layout.CONTROLLER, layout.controller_data(1), makepath=True)
    zk.create(layout.CLUSTER_ID, layout.encode({"version": "1", "id": "c1"}), makepath=True)
    zk.create(layout.topic_path("t"), layout.topic_assignment({0: [1, 2], 1: [2, 1]}), makepath=True)
    for partition, leader in ((0, 1), (1, 2)):
        zk.create(layout.partition_state_path("t", partition),
                  layout.encode({"leader": leader, "isr": [1, 2], "leader_epoch": 0, "controller_epoch": 1}),
                  makepath=True)


def _leaders(answer: dict) -> dict[int, int]:
    [topic] = [t for t in answer["topics"] if t["name"] == "t"]
    return {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}


def test_metadata_is_read_once_until_a_watch_fires(zk_connect: str) -> None:
    zk = KazooClient(hosts=zk_connect)
    zk.start(15)
    discovery = ZooKeeperBrokerDiscovery(zk_connect, timeout_s=15)
    try:
        _register(zk)
        reads: list[str] = []
        get, get_children = discovery._requests.get, discovery._requests.get_children
        discovery._requests.get = lambda path, watch=None: (reads.append(path), get(path, watch))[1]
        discovery._requests.get_children = lambda path, watch=None: (reads.append(path),
                                                                     get_children(path, watch))[1]
        wait_until(lambda: _leaders(discovery.metadata()) == {0: 1, 1: 2}, 10, message="the layout read")
        first = discovery.metadata()
        reads.clear()
        assert discovery.metadata() is first and discovery.metadata(["t"]) == discovery.metadata(["t"])
        reads.clear()
        assert discovery.metadata() is first and discovery.metadata(["t"]) is discovery.metadata(("t",))
        assert reads == [], "answered without reading ZooKeeper"
        # A leader moves: the watch fires and the next answer is read anew.
        zk.set(layout.partition_state_path("t", 1),
               layout.encode({"leader": 1, "isr": [1], "leader_epoch": 1, "controller_epoch": 1}))
        wait_until(lambda: _leaders(discovery.metadata()) == {0: 1, 1: 1}, 10, message="the new leader seen")
        assert _leaders(discovery.metadata(["t"])) == {0: 1, 1: 1}
        # A broker goes: its partitions are leaderless in the next answer.
        zk.delete(layout.broker_path(1))
        wait_until(lambda: _leaders(discovery.metadata()) == {0: -1, 1: -1}, 10, message="the leaderless seen")
        # A topic appears.
        zk.create(layout.topic_path("u"), layout.topic_assignment({0: [2]}), makepath=True)
        wait_until(lambda: "u" in {t["name"] for t in discovery.metadata()["topics"]}, 10, message="the new topic")
    finally:
        discovery.close()
        zk.stop()
        zk.close()
