"""`python -m pipeline topics ...`: create, alter, list, describe and delete topics (like kafka-topics.sh)."""

from __future__ import annotations

import argparse

from pipeline.cli.common import EXIT_USAGE, CliError, key_value, open_admin, positive_int, topic_argument
from pipeline.cli.replication import alter_replication_factor
from pipeline.client.admin import TopicDescription
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `topics` and its subcommands."""
    topics = subparsers.add_parser("topics", help="create, alter, list, describe and delete topics",
                                   description="Create, alter, list, describe and delete topics "
                                               "(like kafka-topics.sh).")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic",
                                description="Create a topic with CreateTopics.")
    create.add_argument("name", metavar="NAME", help="topic name")
    create.add_argument("--partitions", type=positive_int, required=True, metavar="N", help="number of partitions")
    create.add_argument("--replication-factor", type=positive_int, default=1, metavar="R",
                        help="copies of each partition (default: 1)")
    create.add_argument("--config", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config override such as retention.ms=60000 (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed without doing anything when the topic already exists")
    create.set_defaults(command=create_topic, prog=create.prog)

    alter = actions.add_parser("alter", parents=[common],
                               help="add partitions, change the replication factor or the topic's configs",
                               description="Grow a topic to N partitions with CreatePartitions (partitions are "
                                           "only ever added; records keep their partitions), change its "
                                           "replication factor with a partition reassignment (needs --zookeeper; "
                                           "follow it with reassign-partitions --verify), or set and remove its "
                                           "config overrides with IncrementalAlterConfigs (like kafka-configs.sh "
                                           "--alter; the brokers apply them to the topic's logs at once).")
    alter.add_argument("topic", metavar="NAME", nargs="?", help="topic name")
    alter.add_argument("--topic", dest="topic_option", metavar="NAME", help="topic name (instead of NAME)")
    alter.add_argument("--partitions", type=positive_int, metavar="N",
                       help="the new total number of partitions (more than the topic has)")
    alter.add_argument("--replication-factor", type=positive_int, metavar="R",
                       help="the new number of replicas of every partition")
    alter.add_argument("--add-config", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="set a topic config override such as retention.ms=60000 (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove a topic config override: the broker's default applies again (repeatable)")
    alter.set_defaults(command=alter_topic, prog=alter.prog)

    listing = actions.add_parser("list", parents=[common], help="list topic names",
                                 description="Print the name of every topic, one a line, sorted.")
    listing.set_defaults(command=list_topics, prog=listing.prog)

    describe = actions.add_parser("describe", parents=[common], help="show partitions, leaders, replicas, isr",
                                  description="Describe a topic (or all topics): one line per topic, then one "
                                              "line per partition with its leader, replicas and in-sync replicas.")
    describe.add_argument("name", metavar="NAME", nargs="?", help="topic to describe (default: all topics)")
    describe.set_defaults(command=describe_topics, prog=describe.prog)

    delete = actions.add_parser("delete", parents=[common], help="delete topics",
                                description="Delete topics with DeleteTopics.")
    delete.add_argument("names", metavar="NAME", nargs="+", help="topic(s) to delete")
    delete.add_argument("--if-exists", action="store_true", help="succeed when a topic does not exist")
    delete.set_defaults(command=delete_topics, prog=delete.prog)


def create_topic(args: argparse.Namespace) -> int:
    configs = dict(args.config)
    with open_admin(args) as admin:
        try:
            admin.create_topics(args.name, args.partitions, args.replication_factor, configs)
        except KafkaProtocolError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
                print(f"Topic {args.name} already exists.")
                return 0
            raise
    print(f"Created topic {args.name}.")
    return 0


def alter_topic(args: argparse.Namespace) -> int:
    name = topic_argument(args, "topics alter")
    changes = [args.partitions is not None, args.replication_factor is not None,
               bool(args.add_config or args.delete_config)]
    if sum(changes) != 1:
        raise CliError("give one of --partitions, --replication-factor, or --add-config/--delete-config",
                       exit_code=EXIT_USAGE)
    if args.replication_factor is not None:
        return alter_replication_factor(args, name)
    with open_admin(args) as admin:
        if args.partitions is not None:
            admin.create_partitions(name, args.partitions)
            print(f"Topic {name} now has {args.partitions} partitions.")
            return 0
        admin.alter_configs(name, dict(args.add_config), args.delete_config)
        overrides = admin.describe_configs(name, overrides_only=True)
    print(f"Topic {name} now overrides: {format_configs(overrides) or '(nothing)'}.")
    return 0


def list_topics(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        for name in admin.list_topics():
            print(name)
    return 0


def describe_topics(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        descriptions = admin.describe_topics(None if args.name is None else [args.name])
        overrides = {d.name: admin.describe_configs(d.name, overrides_only=True) for d in descriptions}
    for description in descriptions:
        print(format_description(description, overrides[description.name]))
    return 0


def format_description(description: TopicDescription, configs: dict[str, str] | None = None) -> str:
    """kafka-topics.sh --describe layout: a topic line (with the topic's own configs), then a tab-indented line
    per partition."""
    lines = [f"Topic: {description.name}\tPartitionCount: {len(description.partitions)}\t"
             f"ReplicationFactor: {description.replication_factor}\t"
             f"Configs: {format_configs(configs or {})}"]
    for p in description.partitions:
        leader = p.leader if p.leader >= 0 else "none"
        line = (f"\tTopic: {description.name}\tPartition: {p.partition}\tLeader: {leader}"
                f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
        if p.error_code:
            line += f"\tError: {ErrorCode(p.error_code).name}"
        lines.append(line)
    return "\n".join(lines)


def format_configs(configs: dict[str, str]) -> str:
    """Config overrides as kafka-topics.sh shows them: ``key=value`` pairs, sorted, comma-separated."""
    return ",".join(f"{k}={v}" for k, v in sorted(configs.items()))


def delete_topics(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        existing = set(admin.list_topics())
        missing = [name for name in args.names if name not in existing]
        if missing and not args.if_exists:
            raise CliError(f"topic {missing[0]!r} does not exist")
        present = [name for name in args.names if name in existing]
        if present:
            admin.delete_topics(present)
    for name in present:
        print(f"Deleted topic {name}.")
    return 0
