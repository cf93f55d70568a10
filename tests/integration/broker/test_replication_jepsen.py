"""Leader bounces under acks=all load, Jepsen style: 20 bounces of partition leaders, clean (SIGTERM) and hard
(SIGKILL) in turn, while an idempotent acks=all writer sends numbered messages and a reader follows the
leaders; then every partition is read from its start and no acknowledged message may be lost, duplicated,
reordered or misplaced, nothing may come from thin air, and no reader may have seen a message that is gone.

Replication factor 3 with min.insync.replicas 2: another in-sync replica takes over each time. (The same
run on replication factor 1, where the partition waits for its only broker, is
`python -m bench.replication_bounce --replication-factor 1`.)
"""

from __future__ import annotations

import pytest

from tests.support.jepsen.environment import create_topic, jepsen_cluster
from tests.support.jepsen.workload import run

BOUNCES = 20
PARTITIONS = 2


@pytest.mark.slow
def test_leader_bounces_lose_nothing_acknowledged(tmp_path):
    with jepsen_cluster(tmp_path) as cluster:
        create_topic(cluster, "jepsen", PARTITIONS, replication_factor=3, min_insync_replicas=2)
        outcome = run(cluster, "jepsen", PARTITIONS, BOUNCES, hard_ratio=0.5, rate=200)
    result = outcome.result
    print(f"{result.summary()}\nfailover: {outcome.failover_summary()}; {outcome.elapsed_s:.0f}s")
    assert result.valid, result.summary()
    assert len(outcome.bounces) == BOUNCES
    assert sum(b.hard for b in outcome.bounces) == BOUNCES // 2
    # The load runs through the whole test: a sane number acknowledged, every partition written and read.
    assert result.total("acknowledged") >= 100 * BOUNCES, result.summary()
    assert all(p.acknowledged and p.reads for p in result.partitions.values()), result.summary()
