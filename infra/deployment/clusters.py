"""Questions the deployment asks its broker clusters, by their ZooKeeper path: brokers, topics, end offsets."""

from __future__ import annotations

from typing import Iterable

from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.zk.client import connect
from pipeline.zk.registry import ClusterRegistry

__all__ = ["admin", "brokers", "end_offsets", "ensure_topics"]

CLIENT_ID = "pipeline-deployment"


def brokers(zookeeper: str, timeout_s: float = 5.0) -> dict[int, str]:
    """host:port of every broker registered under ``zookeeper`` (a connect string with the cluster's chroot)."""
    client = connect(zookeeper, timeout_s=timeout_s)
    try:
        return {broker_id: f"{b.host}:{b.port}"
                for broker_id, b in ClusterRegistry(client, timeout_s).brokers().items()}
    finally:
        client.stop()
        client.close()


def admin(zookeeper: str, timeout_s: float = 10.0) -> AdminClient:
    """An AdminClient on the brokers registered under ``zookeeper``; ValueError when none is."""
    registered = brokers(zookeeper, timeout_s)
    if not registered:
        raise ValueError(f"no broker is registered under {zookeeper}")
    cluster = Cluster(StaticBrokerList(",".join(registered.values())), client_id=CLIENT_ID, timeout_s=timeout_s)
    return AdminClient(cluster, client_id=CLIENT_ID, timeout_s=timeout_s, close_cluster=True)


def ensure_topics(zookeeper: str, topics: Iterable[str], partitions: int) -> list[str]:
    """Create those of ``topics`` the cluster lacks (``partitions`` each); the names created."""
    with admin(zookeeper) as client:
        missing = sorted(set(topics) - set(client.list_topics()))
        if missing:
            client.create_topics(missing, partitions=partitions)
    return missing


def end_offsets(zookeeper: str, topics: Iterable[str]) -> dict[str, int]:
    """Sum of the log end offsets of each of ``topics`` the cluster has (a topic it lacks is left out)."""
    with admin(zookeeper) as client:
        present = set(client.list_topics())
        return {topic: sum(offset or 0 for offset in client.list_offsets(topic).values())
                for topic in topics if topic in present}
