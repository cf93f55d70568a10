"""The command line `python -m pipeline`: topics, produce, consume, offsets, cluster, consumer groups, users, ACLs
and transactions.

Each subcommand group lives in its own module and registers its parser here; common.py holds the
shared options (--bootstrap-server, --zookeeper), exit codes and error reporting. Packages above pipeline add
subcommands through the entry points of ``COMMANDS_GROUP`` (infra's `status` and `chaos`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import EntryPoint, entry_points
from typing import Sequence

from pipeline.cli import (acls, cluster, consume, consumer_groups, offsets, produce, replication, topics, transactions,
                          users)
from pipeline.cli.common import EXIT_CODES_HELP, add_connection_options, common_options, run_guarded

PROG = "python -m pipeline"
#: The entry-point group in which packages above pipeline register subcommands (infra: `status` and `chaos`); each
#: entry names a module with the ``add_parser``/``run(argv)`` pair, ``run`` getting the arguments from its name on.
COMMANDS_GROUP = "kafka_pipeline.commands"


def registered_commands() -> dict[str, EntryPoint]:
    """The subcommands other packages register, by name."""
    return {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every level has --help)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Command line for the pipeline's Kafka cluster: manage topics, produce and consume "
                    "messages, look up offsets, inspect the cluster and its consumer groups. Every subcommand takes "
                    "--bootstrap-server HOST:PORT or --zookeeper HOST:PORT/CHROOT. `status` and `chaos` work on the "
                    "whole deployment of `make pipeline-up` (its topology file) instead.",
        epilog=EXIT_CODES_HELP + "\n\nexamples:\n"
               "  python -m pipeline topics create events --partitions 4\n"
               "  seq 1000 | python -m pipeline produce events\n"
               "  python -m pipeline consume events --from-beginning --max-messages 10\n"
               "  python -m pipeline offsets events --time earliest\n"
               "  python -m pipeline --zookeeper 127.0.0.1:2181/dc1 consumer-groups describe etl\n"
               "  python -m pipeline --zookeeper 127.0.0.1:2181/dc1 leader-election --topic events\n"
               "  python -m pipeline users --alter --entity-name alice "
               "--add-config 'SCRAM-SHA-512=[password=alice-secret]'",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_options(parser, with_defaults=True)
    subparsers = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)
    common = common_options()
    for module in (topics, produce, consume, offsets, cluster, consumer_groups, replication, users, acls, transactions):
        module.add_parser(subparsers, common)
    # A module may register several subcommands (one entry each): its parsers are added once.
    for module in dict.fromkeys(entry.load() for entry in registered_commands().values()):
        module.add_parser(subparsers, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    registered = registered_commands()
    if argv and argv[0] in registered:
        return registered[argv[0]].load().run(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    # kazoo reports every connection retry as a warning; the CLI reports failures itself, in one line.
    kazoo_log = logging.getLogger("kazoo")
    kazoo_log.addHandler(logging.NullHandler())
    kazoo_log.propagate = False
    return run_guarded(args.command, args, args.prog)


__all__ = ["build_parser", "main"]
