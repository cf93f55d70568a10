"""`consumer-groups list|describe`: the ZooKeeper consumer groups, their members, owners, offsets and lag."""

from __future__ import annotations

import argparse

from pipeline.cli.common import CliError, broker_addresses, open_zookeeper
from pipeline.client.admin import LATEST_TIMESTAMP, AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.errors import KafkaClientError
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.zk.registry import ClusterRegistry


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `consumer-groups list|describe`."""
    parser = subparsers.add_parser(
        "consumer-groups", help="list consumer groups or describe one (members, owners, offsets, lag)",
        description="Consumer groups of the paper's high-level consumer live in ZooKeeper "
                    "(/consumers/<group>): these commands need --zookeeper HOST:PORT/CHROOT.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="list the consumer groups")
    listing.set_defaults(command=list_groups, prog=listing.prog)
    describe = actions.add_parser(
        "describe", parents=[common], help="members, partition owners, committed offsets and lag of a group",
        description="One line per partition the group has an owner or a committed offset for: topic, "
                    "partition, owning consumer stream, committed offset (the next offset the group reads), "
                    "log end offset and lag (log end - committed), then the group's members.")
    describe.add_argument("group", metavar="GROUP")
    describe.set_defaults(command=describe_group, prog=describe.prog)


def list_groups(args: argparse.Namespace) -> int:
    zk = open_zookeeper(args)
    try:
        for group in ClusterRegistry(zk, args.command_timeout_ms / 1000).groups():
            print(group)
    finally:
        zk.stop()
        zk.close()
    return 0


def describe_group(args: argparse.Namespace) -> int:
    zk = open_zookeeper(args)
    try:
        registry = ClusterRegistry(zk, args.command_timeout_ms / 1000)
        if args.group not in registry.groups():
            raise CliError(f"consumer group {args.group!r} does not exist")
        members = registry.members(args.group)
        owners = registry.owners(args.group)
        committed = registry.committed_offsets(args.group)
        subscribed = {topic for m in members for topic in m.subscription if m.pattern == "static"}
        partitions = {tp for tp in owners} | {tp for tp in committed}
        for topic in subscribed:
            partitions |= {(topic, p) for p in registry.assignment(topic)}
    finally:
        zk.stop()
        zk.close()
    ends = log_end_offsets(args, sorted({topic for topic, _ in partitions}))
    print(f"{'TOPIC':<24} {'PARTITION':>9} {'COMMITTED':>10} {'LOG-END':>10} {'LAG':>8}  OWNER")
    for topic, partition in sorted(partitions):
        offset = committed.get((topic, partition))
        end = ends.get((topic, partition))
        lag = end - offset if end is not None and offset is not None else None
        print(f"{topic:<24} {partition:>9} {_or_dash(offset):>10} {_or_dash(end):>10} {_or_dash(lag):>8}  "
              f"{owners.get((topic, partition), '-')}")
    print(f"\nMembers ({len(members)}):")
    for member in members:
        subscription = ", ".join(f"{topic}: {streams}" for topic, streams in sorted(member.subscription.items()))
        kind = "" if member.pattern == "static" else f" ({member.pattern.replace('_', '')})"
        print(f"  {member.consumer_id}  {subscription}{kind}")
    return 0


def log_end_offsets(args: argparse.Namespace, topics: list[str]) -> dict[tuple[str, int], int]:
    """Latest offset of every partition of ``topics``; partitions whose leader is down are left out."""
    if not topics:
        return {}
    cluster = Cluster(StaticBrokerList(broker_addresses(args)), client_id="pipeline-cli",
                      timeout_s=args.command_timeout_ms / 1000)
    ends: dict[tuple[str, int], int] = {}
    try:
        admin = AdminClient(cluster, client_id="pipeline-cli", timeout_s=args.command_timeout_ms / 1000)
        for topic in topics:
            try:
                for partition, offset in admin.list_offsets(topic, timestamp=LATEST_TIMESTAMP).items():
                    if offset is not None:
                        ends[(topic, partition)] = offset
            except (KafkaProtocolError, KafkaClientError):
                continue
    finally:
        cluster.close()
    return ends


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
