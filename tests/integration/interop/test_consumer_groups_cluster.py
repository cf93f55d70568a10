"""A group's coordinator killed (SIGKILL) in a 3-broker cluster: FindCoordinator names another broker once the
dead one's ZooKeeper session ended, and the confluent-kafka group goes on from the offsets it committed (they
live in ZooKeeper): every message produced after the kill is consumed, none committed before is read again."""

from __future__ import annotations

import pytest

from pipeline.client.admin import AdminClient
from tests.integration.broker.test_replication import SETTINGS as REPLICATION_SETTINGS
from tests.support.polling import wait_until
from tests.support.stock_group_member import GroupMember
from tests.support.stock_groups import (GROUP_SETTINGS, coordinator_of, end_offsets, produce_batch, wait_committed,
                                        wait_consumed, wait_shared)

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 6


def test_group_moves_to_another_coordinator_and_resumes_from_its_commits(broker_cluster_factory, zk_connect,
                                                                         group_members, tmp_path):
    cluster = broker_cluster_factory(zk_connect, size=3, overrides={**REPLICATION_SETTINGS, **GROUP_SETTINGS})
    topic, group = "groups-failover", "group-failover"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics(topic, partitions=PARTITIONS, replication_factor=3)
    wait_until(lambda: all(len(cluster.partition_state(topic, p)["isr"]) == 3 for p in range(PARTITIONS)), 30,
               message="every replica in sync")

    def member(name: str) -> GroupMember:
        started = GroupMember(tmp_path / f"{name}.log", "confluent", cluster.bootstrap, group, topic).start()
        group_members.append(started)
        return started

    first = member("first")
    wait_shared([first], PARTITIONS)
    before = produce_batch(cluster.bootstrap, topic, "before", 24, PARTITIONS, acks="all")
    wait_consumed([first], before)
    wait_committed(cluster.bootstrap, group, topic, end_offsets([before], PARTITIONS))
    seen_before_kill = len(first.read().processed)

    coordinator = coordinator_of(cluster.bootstrap, group).node_id
    cluster.brokers[coordinator].kill()
    live = ",".join(broker.bootstrap for broker in cluster.live())
    moved = wait_until(lambda: coordinator_of(live, group).node_id != coordinator, 30, interval=0.2,
                       message=f"FindCoordinator naming another broker than the killed {coordinator}")
    assert moved

    after = produce_batch(live, topic, "after", 24, PARTITIONS, acks="all")
    # A second member makes the group rebalance on its new coordinator: both start from the committed offsets.
    second = member("second")
    wait_shared([first, second], PARTITIONS, timeout=40)
    wait_consumed([first, second], after, timeout=40)
    read_again = {value for _, _, value in first.read().processed[seen_before_kill:] + second.read().processed}
    assert not read_again & set(before), sorted(read_again & set(before))[:5]
    wait_committed(live, group, topic, end_offsets([before, after], PARTITIONS))
