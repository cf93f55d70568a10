"""`consumer-groups`: list, describe, reset the offsets of and delete consumer groups, with
kafka-consumer-groups.sh's options.

Two kinds of group: the paper's, kept in ZooKeeper by the high-level consumer (``/consumers/<group>``
with its members under ``ids``; needs --zookeeper), and broker-coordinated groups of Kafka 0.9+ clients,
reached through their coordinator broker (ListGroups, DescribeGroups, OffsetFetch, OffsetCommit,
DeleteGroups). A group in ZooKeeper with the coordinator's ``metadata`` znode is a broker group.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from typing import Iterator

from kazoo.client import KazooClient

from pipeline.cli.common import CliError, EXIT_USAGE, int_arg, open_admin, open_zookeeper, print_table
from pipeline.cli.group_reset import (
    DATETIME,
    ResetTarget,
    TopicPartition,
    TopicSelection,
    datetime_ms,
    plan_reset,
    target_of,
    topic_selection,
)
from pipeline.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AdminClient
from pipeline.client.errors import KafkaClientError, UnsupportedVersionError
from pipeline.client.group_admin import GroupDescription
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.zk import paper_groups
from pipeline.zk.registry import ClusterRegistry

ACTIONS = ("list", "describe", "reset-offsets", "delete")

_DELETE_REFUSALS = {
    ErrorCode.NON_EMPTY_GROUP: "the group has active members",
    ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
}


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `consumer-groups ACTION` (or Kafka's `consumer-groups --list|--describe|--reset-offsets|--delete`)."""
    parser = subparsers.add_parser(
        "consumer-groups", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="list, describe, reset the offsets of or delete consumer groups",
        description="Consumer groups of both kinds: the paper's, in ZooKeeper (give --zookeeper HOST:PORT/CHROOT), "
                    "and those coordinated by the brokers (Kafka 0.9+ clients). The action is a word (list, "
                    "describe GROUP, reset-offsets, delete) or Kafka's flag (--list, --describe, --reset-offsets, "
                    "--delete) with --group.",
        epilog="examples:\n"
               "  python -m pipeline consumer-groups --list\n"
               "  python -m pipeline consumer-groups --describe --group etl\n"
               "  python -m pipeline consumer-groups --reset-offsets --group etl --topic clicks:0,1 --to-earliest "
               "--execute\n"
               "  python -m pipeline consumer-groups --reset-offsets --group etl --all-topics --shift-by -10\n"
               "  python -m pipeline --zookeeper 127.0.0.1:2181/dc1 consumer-groups delete --group old-etl")
    parser.add_argument("action", nargs="?", choices=ACTIONS, metavar="ACTION",
                        help="list, describe, reset-offsets or delete (or the --list ... flags)")
    parser.add_argument("group_name", nargs="?", metavar="GROUP", help="the group (as --group)")
    modes = parser.add_mutually_exclusive_group()
    for action in ACTIONS:
        modes.add_argument(f"--{action}", dest="mode", action="store_const", const=action,
                           help=f"the {action} action (Kafka's spelling)")
    parser.add_argument("--group", dest="groups", action="append", default=[], metavar="GROUP",
                        help="the group to describe, reset or delete (repeat to delete several)")
    scope = parser.add_argument_group("reset-offsets")
    scope.add_argument("--topic", dest="topics", action="append", type=topic_selection, default=[],
                       metavar="TOPIC[:P,P...]",
                       help="reset these partitions (all of the topic without :P); repeatable")
    scope.add_argument("--all-topics", action="store_true",
                       help="reset every partition the group has a committed offset for")
    targets = scope.add_mutually_exclusive_group()
    targets.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    targets.add_argument("--to-latest", action="store_true", help="to the log end offset")
    targets.add_argument("--to-datetime", type=datetime_ms, metavar="YYYY-MM-DDTHH:mm:SS.sss",
                         help="to the first offset at or after this time (local time unless it ends in Z or +hh:mm)")
    targets.add_argument("--shift-by", type=int_arg, metavar="N",
                         help="move the committed offsets by N (may be negative)")
    targets.add_argument("--to-offset", type=int_arg, metavar="N", help="to offset N")
    runs = scope.add_mutually_exclusive_group()
    runs.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")
    runs.add_argument("--execute", action="store_true", help="commit the new offsets")
    parser.set_defaults(command=run, prog=parser.prog)


def run(args: argparse.Namespace) -> int:
    """Run the action named by the ACTION word or the Kafka flag."""
    if args.action and args.mode and args.action != args.mode:
        raise CliError(f"two actions given: {args.action} and --{args.mode}", exit_code=EXIT_USAGE)
    action = args.action or args.mode
    if action is None:
        raise CliError(f"an action is required: one of {', '.join(ACTIONS)} (or --list, --describe, ...)",
                       exit_code=EXIT_USAGE)
    if args.group_name:
        args.groups = [args.group_name, *args.groups]
    return {"list": list_groups, "describe": describe_group, "reset-offsets": reset_offsets,
            "delete": delete_groups}[action](args)


# -- list ----------------------------------------------------------------------------------------

def list_groups(args: argparse.Namespace) -> int:
    """Print the name of every group: the paper's (with --zookeeper) and the brokers' (ListGroups)."""
    names: set[str] = set()
    ask_brokers = True
    with _zookeeper(args) as zk:
        if zk is not None:
            registry = ClusterRegistry(zk, _timeout_s(args))
            names.update(registry.groups())
            # Paper groups need no broker: a registry without brokers lists just them.
            ask_brokers = bool(registry.brokers())
    if ask_brokers:
        names.update(_broker_groups(args))
    for name in sorted(names):
        print(name)
    return 0


def _broker_groups(args: argparse.Namespace) -> list[str]:
    with open_admin(args) as admin:
        try:
            return [listing.group_id for listing in admin.list_groups()]
        except UnsupportedVersionError:
            # Brokers that do not speak ListGroups coordinate no groups.
            return []


# -- describe ------------------------------------------------------------------------------------

def describe_group(args: argparse.Namespace) -> int:
    """A group's partitions (committed offset, log end, lag, owner) and members."""
    group = _one_group(args, "describe")
    with _zookeeper(args) as zk:
        if zk is not None and _is_paper_group(zk, group, args):
            return _describe_paper_group(args, zk, group)
    return _describe_broker_group(args, group)


def _describe_paper_group(args: argparse.Namespace, zk: KazooClient, group: str) -> int:
    registry = ClusterRegistry(zk, _timeout_s(args))
    members = registry.members(group)
    owners = registry.owners(group)
    committed = registry.committed_offsets(group)
    subscribed = {topic for m in members for topic in m.subscription if m.pattern == "static"}
    partitions = set(owners) | set(committed)
    for topic in subscribed:
        partitions |= {(topic, p) for p in registry.assignment(topic)}
    with open_admin(args) as admin:
        ends = _log_end_offsets(admin, sorted({topic for topic, _ in partitions}))
    print_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"], [
        [topic, partition, *_offset_columns(committed.get((topic, partition)), ends.get((topic, partition))),
         owners.get((topic, partition), "-")] for topic, partition in sorted(partitions)])
    print(f"\nMembers ({len(members)}):")
    for member in members:
        subscription = ", ".join(f"{topic}: {streams}" for topic, streams in sorted(member.subscription.items()))
        kind = "" if member.pattern == "static" else f" ({member.pattern.replace('_', '')})"
        print(f"  {member.consumer_id}  {subscription}{kind}")
    return 0


def _describe_broker_group(args: argparse.Namespace, group: str) -> int:
    with open_admin(args) as admin:
        try:
            described = admin.describe_groups(group)[0]
        except UnsupportedVersionError:
            # Brokers that do not speak DescribeGroups coordinate no groups.
            raise CliError(f"consumer group {group!r} does not exist") from None
        committed = {tp: value.offset for tp, value in admin.fetch_offsets(group).items()}
        if described.state == "Dead" and not committed:
            raise CliError(f"consumer group {group!r} does not exist")
        owner = {tp: member for member in described.members for tp in member.assignment}
        partitions = sorted(set(owner) | set(committed))
        ends = _log_end_offsets(admin, sorted({topic for topic, _ in partitions}))
    print(f"Consumer group {group!r}: state {described.state}, protocol {described.protocol or '-'} "
          f"({described.protocol_type or '-'}), coordinator broker {described.coordinator}\n")
    rows = []
    for tp in partitions:
        member = owner.get(tp)
        who = [member.member_id, member.host, member.client_id] if member else ["-", "-", "-"]
        rows.append([tp[0], tp[1], *_offset_columns(committed.get(tp), ends.get(tp)), *who])
    print_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
                 rows)
    _print_members(described)
    return 0


def _print_members(described: GroupDescription) -> None:
    if not described.members:
        print(f"\nConsumer group {described.group_id!r} has no active members.")
        return
    print(f"\nMembers ({len(described.members)}):")
    print_table(["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"], [
        [m.member_id, m.group_instance_id or "-", m.client_id, m.host,
         ",".join(f"{topic}-{p}" for topic, p in m.assignment) or "-"] for m in described.members])


def _offset_columns(committed: int | None, end: int | None) -> list[str]:
    lag = end - committed if end is not None and committed is not None else None
    return [_or_dash(committed), _or_dash(end), _or_dash(lag)]


def _log_end_offsets(admin: AdminClient, topics: list[str]) -> dict[TopicPartition, int]:
    """Latest offset of every partition of ``topics``; partitions whose leader is down are left out."""
    ends: dict[TopicPartition, int] = {}
    for topic in topics:
        try:
            for partition, offset in admin.list_offsets(topic, timestamp=LATEST_TIMESTAMP).items():
                if offset is not None:
                    ends[(topic, partition)] = offset
        except (KafkaProtocolError, KafkaClientError):
            continue
    return ends


# -- reset-offsets -------------------------------------------------------------------------------

def reset_offsets(args: argparse.Namespace) -> int:
    """Print (and with --execute, commit) the group's new offsets; refused while the group has members."""
    group = _one_group(args, "reset-offsets")
    target = target_of(args)
    if bool(args.topics) == bool(args.all_topics):
        raise CliError("--reset-offsets needs either --topic TOPIC[:P,P...] or --all-topics", exit_code=EXIT_USAGE)
    with _zookeeper(args) as zk, open_admin(args) as admin:
        paper = zk is not None and _is_paper_group(zk, group, args)
        if paper:
            members = paper_groups.registered_members(zk, group, _timeout_s(args))
            if members:
                raise CliError(f"assignments can only be reset if the group {group!r} is inactive, but it has "
                               f"{len(members)} registered consumer(s)")
            committed = ClusterRegistry(zk, _timeout_s(args)).committed_offsets(group)
        else:
            described = admin.describe_groups(group)[0]
            if described.is_active:
                raise CliError(f"assignments can only be reset if the group {group!r} is inactive, but the current "
                               f"state is {described.state}")
            committed = {tp: value.offset for tp, value in admin.fetch_offsets(group).items()}
        partitions = _selected_partitions(admin, args.topics, committed)
        plan = _plan(admin, target, partitions, committed)
        if args.execute:
            if paper:
                paper_groups.write_offsets(zk, group, plan, _timeout_s(args))
            else:
                admin.commit_offsets(group, plan)
    print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                 [[group, topic, partition, offset] for (topic, partition), offset in plan.items()])
    if not args.execute:
        print("(dry run: nothing changed; add --execute to commit these offsets)", file=sys.stderr)
    return 0


def _selected_partitions(admin: AdminClient, topics: list[TopicSelection],
                         committed: dict[TopicPartition, int]) -> list[TopicPartition]:
    if not topics:
        return sorted(committed)
    chosen = set()
    for selection in topics:
        known = admin.cluster.partitions_for(selection.topic)
        for partition in selection.partitions or known:
            if partition not in known:
                raise CliError(f"topic {selection.topic!r} has no partition {partition} (it has {len(known)})")
            chosen.add((selection.topic, partition))
    return sorted(chosen)


def _plan(admin: AdminClient, target: ResetTarget, partitions: list[TopicPartition],
          committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    def offsets_at(timestamp: int) -> dict[TopicPartition, int | None]:
        found: dict[TopicPartition, int | None] = {}
        for topic in sorted({topic for topic, _ in partitions}):
            wanted = [p for t, p in partitions if t == topic]
            found.update({(topic, p): o for p, o in admin.list_offsets(topic, wanted, timestamp).items()})
        return found

    at_time = offsets_at(target.value) if target.kind == DATETIME else None
    return plan_reset(target, partitions, committed, offsets_at(EARLIEST_TIMESTAMP), offsets_at(LATEST_TIMESTAMP),
                      at_time)


# -- delete --------------------------------------------------------------------------------------

def delete_groups(args: argparse.Namespace) -> int:
    """Delete each group: DeleteGroups for a broker group, its ZooKeeper tree for an inactive paper group."""
    if not args.groups:
        raise CliError("delete needs --group GROUP", exit_code=EXIT_USAGE)
    failures = []
    with _zookeeper(args) as zk:
        for group in args.groups:
            try:
                if zk is not None and _is_paper_group(zk, group, args):
                    paper_groups.delete_group(zk, group, _timeout_s(args))
                else:
                    with open_admin(args) as admin:
                        admin.delete_groups(group)
            except paper_groups.ActiveGroupError as exc:
                failures.append(f"group {group!r} could not be deleted: NON_EMPTY_GROUP ({exc})")
            except KafkaProtocolError as exc:
                reason = _DELETE_REFUSALS.get(exc.code, exc.message or "")
                failures.append(f"group {group!r} could not be deleted: {exc.code.name} ({reason})")
            else:
                print(f"Deletion of consumer group {group!r} was successful.")
    if failures:
        raise CliError("; ".join(failures))
    return 0


# -- shared --------------------------------------------------------------------------------------

@contextmanager
def _zookeeper(args: argparse.Namespace) -> Iterator[KazooClient | None]:
    """The --zookeeper client for the command's duration, or None without --zookeeper."""
    if not args.zookeeper:
        yield None
        return
    zk = open_zookeeper(args)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def _is_paper_group(zk: KazooClient, group: str, args: argparse.Namespace) -> bool:
    """Whether ``group`` is a paper group in ZooKeeper (there, and without a coordinator's record)."""
    return group in ClusterRegistry(zk, _timeout_s(args)).groups() and \
        not paper_groups.is_broker_group(zk, group, _timeout_s(args))


def _one_group(args: argparse.Namespace, action: str) -> str:
    if len(args.groups) != 1:
        raise CliError(f"{action} needs one group: GROUP or --group GROUP", exit_code=EXIT_USAGE)
    return args.groups[0]


def _timeout_s(args: argparse.Namespace) -> float:
    return args.command_timeout_ms / 1000


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
