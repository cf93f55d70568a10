"""`leader-election` and `reassign-partitions` (like kafka-leader-election.sh and kafka-reassign-partitions.sh),
and the reassignment behind `topics alter --replication-factor`.

They write the controller's request znodes (/admin/preferred_replica_election, /admin/reassign_partitions)
under --zookeeper and follow them there: the controller carries a request out and removes it.
"""

from __future__ import annotations

import argparse

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from pipeline.cli.common import CliError, non_negative_int, open_zookeeper
from pipeline.zk import layout
from pipeline.zk.client import watch_until
from pipeline.zk.registry import ClusterRegistry


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `leader-election` and `reassign-partitions`."""
    election = subparsers.add_parser(
        "leader-election", parents=[common], help="move leadership back to the preferred replicas",
        description="Preferred replica election (needs --zookeeper): the first replica of each partition (of "
                    "every topic, of --topic, or of --topic's --partition) becomes its leader where it is alive "
                    "and in sync. Waits until the controller has carried it out.")
    election.add_argument("--topic", metavar="TOPIC", help="only this topic's partitions")
    election.add_argument("--partition", type=non_negative_int, metavar="P", help="only this partition (with --topic)")
    election.set_defaults(command=elect_leaders, prog=election.prog)

    reassign = subparsers.add_parser(
        "reassign-partitions", parents=[common], help="move partition replicas between brokers",
        description="Start a partition reassignment from a JSON file "
                    '({"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}), or --verify '
                    "how far it went (needs --zookeeper). The new replicas catch up before the old ones are "
                    "dropped; producing and consuming go on meanwhile.")
    reassign.add_argument("--reassignment-json-file", required=True, metavar="FILE", help="the reassignment")
    mode = reassign.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="start the reassignment (the default)")
    mode.add_argument("--verify", action="store_true", help="report each partition's progress")
    reassign.set_defaults(command=reassign_partitions, prog=reassign.prog)


def close(zk: KazooClient) -> None:
    zk.stop()
    zk.close()


def wait_removed(zk: KazooClient, path: str, timeout_s: float) -> bool:
    """Whether the controller removed ``path`` (carried the request out) within ``timeout_s``."""
    return watch_until(zk, path, lambda data, stat: True if stat is None else None, timeout_s) is not None


def elect_leaders(args: argparse.Namespace) -> int:
    if args.partition is not None and not args.topic:
        raise CliError("--partition needs --topic", exit_code=2)
    zk = open_zookeeper(args)
    try:
        registry = ClusterRegistry(zk, args.command_timeout_ms / 1000)
        partitions: list[layout.TopicPartition] | None = None
        if args.topic:
            assignment = registry.assignment(args.topic)
            if not assignment:
                raise CliError(f"topic {args.topic!r} does not exist")
            if args.partition is not None and args.partition not in assignment:
                raise CliError(f"topic {args.topic!r} has no partition {args.partition}")
            partitions = [(args.topic, p) for p in sorted(assignment) if args.partition in (None, p)]
        try:
            zk.create(layout.ADMIN_PREFERRED_REPLICA_ELECTION, layout.partition_list(partitions), makepath=True)
        except NodeExistsError:
            raise CliError("a preferred replica election is already in progress") from None
        if not wait_removed(zk, layout.ADMIN_PREFERRED_REPLICA_ELECTION, args.command_timeout_ms / 1000):
            raise CliError("the controller has not carried out the election yet (is a controller running?)")
        assignments = {t: registry.assignment(t) for t in ([args.topic] if args.topic else registry.topics())}
        for topic, partition in partitions or [(t, p) for t, a in assignments.items() for p in sorted(a)]:
            state = registry.partition_state(topic, partition) or {}
            replicas = assignments[topic].get(partition, [])
            leader = state.get("leader", -1)
            outcome = "preferred" if replicas and leader == replicas[0] else "not preferred (replica not in sync)"
            print(f"{topic}-{partition}\tLeader: {leader if leader >= 0 else 'none'}\t{outcome}")
    finally:
        close(zk)
    return 0


def read_reassignment(path: str) -> dict[layout.TopicPartition, list[int]]:
    """The partitions and target replica lists of a Kafka reassignment JSON file."""
    try:
        with open(path, "rb") as file:
            targets = layout.parse_reassignment(file.read())
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"{path} is not a reassignment (JSON with partitions of topic, partition, replicas): {exc}") \
            from None
    if not targets:
        raise CliError(f"{path} names no partition")
    return targets


def start_reassignment(zk: KazooClient, registry: ClusterRegistry,
                       targets: dict[layout.TopicPartition, list[int]]) -> None:
    """Check the targets against the cluster and write the reassignment request; prints the current
    assignment (to reassign back with) first."""
    brokers = set(registry.brokers())
    current: dict[layout.TopicPartition, list[int]] = {}
    for (topic, partition), replicas in sorted(targets.items()):
        assignment = registry.assignment(topic)
        if partition not in assignment:
            raise CliError(f"topic {topic!r} has no partition {partition}")
        if not replicas or len(set(replicas)) != len(replicas):
            raise CliError(f"the replicas of {topic}-{partition} must be distinct broker ids, got {replicas}")
        if not set(replicas) <= brokers:
            raise CliError(f"broker(s) {sorted(set(replicas) - brokers)} of {topic}-{partition} are not registered")
        current[(topic, partition)] = assignment[partition]
    print("Current partition replica assignment (to roll back):")
    print(layout.reassignment_request(current).decode())
    try:
        zk.create(layout.ADMIN_REASSIGN_PARTITIONS, layout.reassignment_request(targets), makepath=True)
    except NodeExistsError:
        raise CliError("a partition reassignment is already in progress") from None
    print(f"Started the reassignment of {len(targets)} partition(s).")


def verify_reassignment(zk: KazooClient, registry: ClusterRegistry,
                        targets: dict[layout.TopicPartition, list[int]]) -> int:
    """Print each partition's progress; 1 when one is neither pending nor at its target (else 0)."""
    data = zk.get(layout.ADMIN_REASSIGN_PARTITIONS)[0] if zk.exists(layout.ADMIN_REASSIGN_PARTITIONS) else None
    pending = layout.parse_reassignment(data)
    failures = 0
    for (topic, partition), replicas in sorted(targets.items()):
        if (topic, partition) in pending:
            outcome = "is still in progress"
        elif registry.assignment(topic).get(partition) == replicas:
            outcome = "is completed"
        else:
            outcome, failures = "failed", failures + 1
        print(f"Reassignment of partition {topic}-{partition} {outcome}")
    return 1 if failures else 0


def reassign_partitions(args: argparse.Namespace) -> int:
    targets = read_reassignment(args.reassignment_json_file)
    zk = open_zookeeper(args)
    try:
        registry = ClusterRegistry(zk, args.command_timeout_ms / 1000)
        if args.verify:
            return verify_reassignment(zk, registry, targets)
        start_reassignment(zk, registry, targets)
    finally:
        close(zk)
    return 0


def with_replication_factor(assignment: dict[int, list[int]], brokers: list[int],
                            factor: int) -> dict[int, list[int]]:
    """Each partition's replica list at ``factor`` replicas: the first ones kept; new ones taken from the
    brokers following the first replica (sorted ids, wrapping), as the controller's round-robin places them."""
    ordered = sorted(brokers)
    if not 1 <= factor <= len(ordered):
        raise ValueError(f"replication factor {factor} needs 1..{len(ordered)} registered brokers")
    changed = {}
    for partition, replicas in sorted(assignment.items()):
        start = ordered.index(replicas[0]) if replicas and replicas[0] in ordered else partition
        following = [ordered[(start + k) % len(ordered)] for k in range(len(ordered))]
        grown = list(replicas[:factor]) + [b for b in following if b not in replicas][:max(0, factor - len(replicas))]
        changed[partition] = grown
    return changed


def alter_replication_factor(args: argparse.Namespace, topic: str) -> int:
    """`topics alter --replication-factor`: reassign every partition of ``topic`` to that many replicas."""
    zk = open_zookeeper(args)
    try:
        registry = ClusterRegistry(zk, args.command_timeout_ms / 1000)
        assignment = registry.assignment(topic)
        if not assignment:
            raise CliError(f"topic {topic!r} does not exist")
        try:
            wanted = with_replication_factor(assignment, list(registry.brokers()), args.replication_factor)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        targets = {(topic, p): r for p, r in wanted.items() if r != assignment[p]}
        if not targets:
            print(f"Topic {topic} already has replication factor {args.replication_factor}.")
            return 0
        start_reassignment(zk, registry, targets)
    finally:
        close(zk)
    return 0
