"""The real ZooKeeper the pipeline runs on: launcher, chroots, session expiry, a 3-node ensemble."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from pipeline.zk.client import ZooKeeperTimeout, ZooKeeperUnavailable, connect, watch_until
from pipeline.zk.registry import ClusterRegistry
from pipeline.zk.server import ZooKeeperServer
from tests.support import free_port, wait_until
from tests.support.zookeeper import expire_session, frozen, unique_chroot


def test_chroot_is_created_and_paths_are_relative_to_it(zookeeper_server, zk_connect):
    client = connect(zk_connect)
    try:
        client.ensure_path("/brokers/ids")
        assert client.get_children("/") == ["brokers"]
    finally:
        client.stop()
        client.close()
    chroot = zk_connect.partition("/")[2]
    root = KazooClient(hosts=zookeeper_server.connect_string)
    root.start(10)
    try:
        assert root.exists(f"/{chroot}/brokers/ids")
    finally:
        root.stop()
        root.close()


def test_watch_until_follows_a_node_until_its_answer_and_gives_up_at_the_deadline(zk_connect):
    client = connect(zk_connect)
    try:
        assert watch_until(client, "/answer", lambda data, stat: data or None, 0.2) is None
        client.create("/answer", b"")
        timer = threading.Timer(0.1, client.set, args=("/answer", b"done"))
        timer.start()
        assert watch_until(client, "/answer", lambda data, stat: data or None, 10) == b"done"
        timer.join()
        threading.Timer(0.1, client.delete, args=("/answer",)).start()
        assert watch_until(client, "/answer", lambda data, stat: True if stat is None else None, 10) is True
    finally:
        client.stop()
        client.close()


def test_unreachable_zookeeper_is_a_clear_error():
    with pytest.raises(ZooKeeperUnavailable, match="no ZooKeeper server"):
        connect(f"127.0.0.1:{free_port()}/x", timeout_s=1)


def test_expired_session_drops_ephemeral_nodes(zk_connect):
    client = connect(zk_connect)
    observer = connect(zk_connect)
    try:
        client.create("/alive", b"", ephemeral=True)
        expire_session(client)
        wait_until(lambda: observer.exists("/alive") is None, 10, message="ephemeral node outlived its session")
        # kazoo opens a new session by itself; the owner must recreate what it owned.
        wait_until(lambda: client.connected, 20, message="client did not reconnect")
        client.create("/alive", b"", ephemeral=True)
        assert observer.exists("/alive")
    finally:
        for c in (client, observer):
            c.stop()
            c.close()


def test_ensemble_survives_the_loss_of_one_node(zk_ensemble):
    client = KazooClient(hosts=zk_ensemble.connect_string, timeout=6)
    client.start(20)
    try:
        client.create("/before", b"1")
        session = client.client_id
        zk_ensemble.leader().kill()
        wait_until(zk_ensemble.find_leader, 20, message="no new leader elected")
        wait_until(lambda: client.connected, 20, message="client did not reconnect")
        client.create("/after", b"2")
        assert client.get("/before")[0] == b"1"
        assert client.client_id == session, "the session must survive a ZooKeeper node's death"
    finally:
        client.stop()
        client.close()


def test_registry_reads_fail_within_their_bound_while_zookeeper_is_stopped(tmp_path):
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        client = connect(server.connect_string + unique_chroot(), session_timeout_s=30)
        try:
            client.ensure_path("/brokers/ids")
            registry = ClusterRegistry(client, timeout_s=1.0)
            assert registry.brokers() == {}
            with frozen(server):
                started = time.monotonic()
                with pytest.raises((ZooKeeperTimeout, ConnectionLoss)):
                    registry.brokers()
                assert time.monotonic() - started < 10
            wait_until(lambda: client.connected, 20, message="the client did not reconnect")
            wait_until(lambda: _answers(registry), 20, message="reads did not resume")
        finally:
            client.stop()
            client.close()


def _answers(registry: ClusterRegistry) -> bool:
    try:
        return registry.brokers() == {}
    except (ZooKeeperTimeout, ConnectionLoss):
        return False
