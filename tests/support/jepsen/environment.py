"""A cluster for Jepsen-style runs: its own ZooKeeper with a short tick, so that brokers can use a short
session timeout and a SIGKILLed broker leaves ZooKeeper quickly, three brokers, and a replicated topic."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from pipeline.client.admin import AdminClient
from pipeline.zk.server import ZooKeeperServer
from tests.support.cluster import BrokerCluster

# ZooKeeper allows sessions of 2 to 20 ticks.
ZOOKEEPER_TICK_MS = 500
SESSION_TIMEOUT_MS = 3000


@contextlib.contextmanager
def jepsen_cluster(base_dir: Path, brokers: int = 3, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                   overrides: dict[str, object] | None = None) -> Iterator[BrokerCluster]:
    """A started ZooKeeper and ``brokers`` brokers on it; everything is stopped when the block ends."""
    with ZooKeeperServer(Path(base_dir) / "zookeeper", tick_ms=ZOOKEEPER_TICK_MS) as zookeeper:
        settings = {"zookeeper.session.timeout.ms": session_timeout_ms, **(overrides or {})}
        with BrokerCluster(Path(base_dir) / "brokers", f"{zookeeper.connect_string}/jepsen", brokers,
                           settings) as cluster:
            yield cluster


def create_topic(cluster: BrokerCluster, topic: str, partitions: int, replication_factor: int,
                 min_insync_replicas: int) -> None:
    """Create the topic with its min.insync.replicas and wait until every broker sees every partition led."""
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics(topic, partitions=partitions, replication_factor=replication_factor,
                            configs={"min.insync.replicas": str(min_insync_replicas)})
    cluster.wait_for_metadata(topic, partitions)
