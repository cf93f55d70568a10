"""infra.deployment.clusters.ensure_topics against a real cluster, as `make pipeline-up` uses it: a missing topic is
created with the topology's configs and replication, an existing one is given the configs wanted, and a replication
factor it does not have is named with the command that raises it (up does not move replicas itself)."""

from __future__ import annotations

from typing import Callable

from infra.deployment import clusters
from tests.support.cluster import BrokerCluster
from tests.support.zookeeper import unique_chroot


def test_up_sets_an_existing_topic_s_configs_and_names_a_replication_it_does_not_move(
        zookeeper_server: object, broker_cluster_factory: Callable[..., BrokerCluster]) -> None:
    zookeeper = zookeeper_server.connect_string + unique_chroot("dc1")  # type: ignore[attr-defined]
    broker_cluster_factory(zookeeper, size=1)
    first = clusters.ensure_topics(zookeeper, {"ensured": {"retention.ms": "60000"}}, 1, 1)
    assert (first.created, first.reconfigured, first.mismatched) == (["ensured"], [], [])
    again = clusters.ensure_topics(zookeeper, {"ensured": {"retention.ms": "120000", "min.insync.replicas": "1"}},
                                   1, 3)
    assert (again.created, again.reconfigured) == ([], ["ensured"])
    assert again.mismatched == [f"ensured has replication factor 1, not 3 as the topology says: python -m pipeline "
                                f"topics alter ensured --replication-factor 3 --zookeeper {zookeeper}"]
    with clusters.admin(zookeeper) as admin:
        assert admin.describe_configs("ensured")["retention.ms"] == "120000"
    unchanged = clusters.ensure_topics(zookeeper, {"ensured": {"retention.ms": "120000"}}, 1, 1)
    assert (unchanged.created, unchanged.reconfigured, unchanged.mismatched) == ([], [], [])
