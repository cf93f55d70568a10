"""Leader elections by the controller inside real brokers: it acts on the broker properties it was started with."""

from __future__ import annotations

from pipeline.zk import layout
from tests.support import wait_until


def leadership(cluster, topic: str) -> tuple[int, list[int]]:
    state = cluster.partition_state(topic, 0)
    return state["leader"], state["isr"]


def test_unclean_leader_election_enable_reaches_the_controller(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, overrides={"zookeeper.session.timeout.ms": 4000,
                                                            "unclean.leader.election.enable": "true"})
    cluster.zk.create(layout.create_topic_request_path("u"), layout.create_topic_request(1, 3, {}))
    wait_until(lambda: cluster.zk.exists(layout.partition_state_path("u", 0)), 20, message="'u' created")
    replicas = cluster.assignment("u")[0]
    leader, followers = replicas[0], replicas[1:]
    assert leadership(cluster, "u") == (leader, replicas)
    for follower in followers:
        cluster.brokers[follower].kill()
    wait_until(lambda: leadership(cluster, "u") == (leader, [leader]), 30, message="the followers out of the ISR")
    cluster.brokers[leader].kill()
    wait_until(lambda: cluster.registered() == set(), 30, message="every broker gone")
    # A replica outside the ISR comes back (its controller finds the leader gone): only an unclean election
    # lets it lead.
    cluster.brokers[followers[0]].start()
    wait_until(lambda: leadership(cluster, "u") == (followers[0], [followers[0]]), 30,
               message="the returning follower elected")
