"""`leader-election`, `reassign-partitions` and `topics alter --replication-factor` against a real ZooKeeper and
a running controller, brokers stood in by their registrations and leaders' ISR changes simulated."""

from __future__ import annotations

import json

from pipeline.cli import main
from pipeline.zk import layout
from tests.integration.broker.test_cluster_controller import (clients, leader_sets_isr, leadership,  # fixture
                                                              register, replicated_topic, stop_broker)
from tests.support import wait_until

__all__ = ["clients"]


def run(capsys, zk_connect: str, *argv: str) -> tuple[int, str, str]:
    code = main(["--zookeeper", zk_connect, "--command-timeout-ms", "10000", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_leader_election_puts_the_preferred_replica_back(clients, zk_connect, capsys):
    zk = clients[3]
    with replicated_topic(clients):
        stop_broker(clients, 1)
        wait_until(lambda: leadership(zk) == (2, 1, [2, 3]), 10, message="2 elected")
        register(clients[1], 1)
        leader_sets_isr(zk, "r", 0, [2, 3, 1])
        code, out, _ = run(capsys, zk_connect, "leader-election", "--topic", "r", "--partition", "0")
        assert code == 0 and out.strip() == "r-0\tLeader: 1\tpreferred"
        assert leadership(zk) == (1, 2, [2, 3, 1])
        assert zk.exists(layout.ADMIN_PREFERRED_REPLICA_ELECTION) is None
        code, out, _ = run(capsys, zk_connect, "leader-election")
        assert code == 0 and out.strip() == "r-0\tLeader: 1\tpreferred"
        code, _, err = run(capsys, zk_connect, "leader-election", "--topic", "absent")
        assert code == 1 and "'absent' does not exist" in err
        code, _, err = run(capsys, zk_connect, "leader-election", "--partition", "0")
        assert code == 2 and "--partition needs --topic" in err


def reassignment_file(tmp_path, targets: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / "reassignment.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in targets.items()]}))
    return str(path)


def test_reassign_partitions_executes_and_verifies(clients, zk_connect, capsys, tmp_path):
    zk = clients[3]
    with replicated_topic(clients, replicas={0: [1], 1: [2]}):
        bad = reassignment_file(tmp_path, {("r", 0): [1, 9]})
        code, _, err = run(capsys, zk_connect, "reassign-partitions", "--reassignment-json-file", bad)
        assert code == 1 and "[9]" in err and "not registered" in err
        path = reassignment_file(tmp_path, {("r", 0): [2]})
        code, out, _ = run(capsys, zk_connect, "reassign-partitions", "--reassignment-json-file", path, "--execute")
        assert code == 0 and '"replicas":[1]' in out and "Started the reassignment of 1 partition(s)." in out
        wait_until(lambda: layout.parse_topic_assignment(zk.get(layout.topic_path("r"))[0])[0] == [2, 1], 10,
                   message="2 added")
        code, out, _ = run(capsys, zk_connect, "reassign-partitions", "--reassignment-json-file", path, "--verify")
        assert code == 0 and out.strip() == "Reassignment of partition r-0 is still in progress"
        code, _, err = run(capsys, zk_connect, "reassign-partitions", "--reassignment-json-file", path)
        assert code == 1 and "already in progress" in err
        leader_sets_isr(zk, "r", 0, [1, 2])
        wait_until(lambda: zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) is None, 10, message="the reassignment done")
        code, out, _ = run(capsys, zk_connect, "reassign-partitions", "--reassignment-json-file", path, "--verify")
        assert code == 0 and out.strip() == "Reassignment of partition r-0 is completed"
        assert leadership(zk) == (2, 1, [2])


def test_topics_alter_replication_factor_reassigns_every_partition(clients, zk_connect, capsys):
    zk = clients[3]
    with replicated_topic(clients, replicas={0: [1], 1: [2]}):
        code, out, _ = run(capsys, zk_connect, "topics", "alter", "--topic", "r", "--replication-factor", "2")
        assert code == 0 and "Started the reassignment of 2 partition(s)." in out
        wait_until(lambda: layout.parse_topic_assignment(zk.get(layout.topic_path("r"))[0]) == {0: [1, 2], 1: [2, 3]},
                   10, message="the replicas added")
        leader_sets_isr(zk, "r", 0, [1, 2])
        leader_sets_isr(zk, "r", 1, [2, 3])
        wait_until(lambda: zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) is None, 10, message="the reassignment done")
        assert leadership(zk, "r", 0) == (1, 0, [1, 2]) and leadership(zk, "r", 1) == (2, 0, [2, 3])
        code, out, _ = run(capsys, zk_connect, "topics", "alter", "r", "--replication-factor", "2")
        assert code == 0 and out.strip() == "Topic r already has replication factor 2."
