"""The deployment's broker health check on a real ZooKeeper: a registration counts only when it was made by the
broker's current life (a SIGKILLed broker's node outlives it until its session expires)."""

from __future__ import annotations

import json
import time

from kazoo.client import KazooClient

from infra.deployment.programs import broker_registered
from pipeline.zk.server import ZooKeeperServer
from tests.support.zookeeper import unique_chroot


def test_a_registration_older_than_the_process_does_not_count(zookeeper_server: ZooKeeperServer) -> None:
    chroot = unique_chroot("health")
    connect = zookeeper_server.connect_string + chroot
    client = KazooClient(hosts=zookeeper_server.connect_string)
    client.start(timeout=10)
    try:
        assert not broker_registered(connect, 1)
        registered_ms = int(time.time() * 1000) - 60_000
        client.create(f"{chroot}/brokers/ids/1", json.dumps({"host": "127.0.0.1", "port": 9092,
                                                            "timestamp": str(registered_ms)}).encode(),
                      ephemeral=True, makepath=True)
        assert broker_registered(connect, 1)
        assert broker_registered(connect, 1, since=registered_ms / 1000)
        # the process was (re)started 30 s after that registration: it is the previous life's
        assert not broker_registered(connect, 1, since=registered_ms / 1000 + 30)
        assert not broker_registered(connect, 2)
    finally:
        client.stop()
        client.close()
