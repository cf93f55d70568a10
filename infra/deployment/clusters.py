"""Questions the deployment asks its broker clusters, by their ZooKeeper path: brokers, topics, end offsets.

``security`` is how to connect to the brokers: the deployment's tools pass admin's when it is secured
(:func:`infra.deployment.secured.admin_command_config`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity
from pipeline.zk.client import connect
from pipeline.zk.registry import ClusterRegistry

__all__ = ["EnsuredTopics", "admin", "brokers", "end_offsets", "ensure_topics"]

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


def admin(zookeeper: str, timeout_s: float = 10.0, security: ClientSecurity = PLAINTEXT_SECURITY) -> AdminClient:
    """An AdminClient on the brokers registered under ``zookeeper``; ValueError when none is."""
    registered = brokers(zookeeper, timeout_s)
    if not registered:
        raise ValueError(f"no broker is registered under {zookeeper}")
    cluster = Cluster(StaticBrokerList(",".join(registered.values())), client_id=CLIENT_ID, timeout_s=timeout_s,
                      security=security)
    return AdminClient(cluster, client_id=CLIENT_ID, timeout_s=timeout_s, close_cluster=True)


@dataclass
class EnsuredTopics:
    """What :func:`ensure_topics` did: topics created, existing topics whose configs it set to the wanted values,
    and existing topics whose replication factor differs from the wanted one (a line each: it does not move
    replicas)."""

    created: list[str] = field(default_factory=list)
    reconfigured: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)


def ensure_topics(zookeeper: str, topics: Mapping[str, Mapping[str, str]], partitions: int,
                  replication_factor: int, security: ClientSecurity = PLAINTEXT_SECURITY) -> EnsuredTopics:
    """Create those of ``topics`` (name -> configs) the cluster lacks, with ``partitions`` partitions and
    ``replication_factor`` replicas each; give the existing ones the configs wanted, and report those whose
    replication factor differs."""
    ensured = EnsuredTopics()
    with admin(zookeeper, security=security) as client:
        present = set(client.list_topics())
        for name in sorted(set(topics) - present):
            client.create_topics(name, partitions=partitions, replication_factor=replication_factor,
                                 configs=topics[name])
            ensured.created.append(name)
        existing = sorted(set(topics) & present)
        for description in client.describe_topics(existing) if existing else []:
            if description.replication_factor != replication_factor:
                ensured.mismatched.append(f"{description.name} has replication factor "
                                          f"{description.replication_factor}, not {replication_factor} as the "
                                          f"topology says: python -m pipeline topics alter {description.name} "
                                          f"--replication-factor {replication_factor} --zookeeper {zookeeper}")
            wanted = dict(topics[description.name])
            current = client.describe_configs(description.name)
            if any(current.get(key) != value for key, value in wanted.items()):
                client.alter_configs(description.name, wanted)
                ensured.reconfigured.append(description.name)
    return ensured


def end_offsets(zookeeper: str, topics: Iterable[str], security: ClientSecurity = PLAINTEXT_SECURITY) -> dict[str, int]:
    """Sum of the log end offsets of each of ``topics`` the cluster has (a topic it lacks is left out)."""
    with admin(zookeeper, security=security) as client:
        present = set(client.list_topics())
        return {topic: sum(offset or 0 for offset in client.list_offsets(topic).values())
                for topic in topics if topic in present}
