"""`python -m pipeline transactions list|describe`: the transactions the brokers coordinate, as kafka-transactions.sh
prints them.

``list`` asks every broker (ListTransactions) and prints TransactionalId, Coordinator, ProducerId and
TransactionState; ``describe --transactional-id X`` asks X's coordinator (DescribeTransactions) and prints
CoordinatorId, TransactionalId, ProducerId, ProducerEpoch, TransactionState, TransactionTimeoutMs,
CurrentTransactionStartTimeMs, TransactionDurationMs and TopicPartitions (None without an open transaction).
"""

from __future__ import annotations

import argparse
import time

from pipeline.cli.common import non_negative_int, open_admin, print_table

ACTIONS = ("list", "describe")


def _id_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected producer ids separated by commas, got {text!r}") from None


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `transactions list` and `transactions describe`."""
    parser = subparsers.add_parser(
        "transactions", help="list and describe transactions (kafka-transactions.sh)",
        description="The transactional ids the brokers coordinate (KIP-98 transactions), as kafka-transactions.sh "
                    "shows them.",
        epilog="examples:\n"
               "  python -m pipeline transactions list\n"
               "  python -m pipeline transactions list --state-filters Ongoing\n"
               "  python -m pipeline transactions describe --transactional-id mirror-dc1-0",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="every transactional id and its state",
                                 description="List the transactional ids every broker coordinates (ListTransactions).")
    listing.add_argument("--state-filters", type=lambda text: [s for s in text.split(",") if s], default=[],
                         metavar="STATE[,STATE...]",
                         help="only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                              "CompleteAbort, Dead, PrepareEpochFence)")
    listing.add_argument("--producer-id-filters", type=_id_list, default=[], metavar="ID[,ID...]",
                         help="only these producer ids")
    listing.add_argument("--duration-filter", type=non_negative_int, default=-1, metavar="MS",
                         help="only transactions open longer than this many ms")
    listing.set_defaults(command=list_transactions, prog=listing.prog)
    describe = actions.add_parser("describe", parents=[common], help="one transactional id's state",
                                  description="Describe a transactional id as its coordinator knows it "
                                              "(DescribeTransactions).")
    describe.add_argument("--transactional-id", required=True, metavar="ID", help="the transactional id")
    describe.set_defaults(command=describe_transaction, prog=describe.prog)


def list_transactions(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        listings = admin.list_transactions(args.state_filters, args.producer_id_filters, args.duration_filter)
    print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                [[t.transactional_id, t.coordinator, t.producer_id, t.state] for t in listings])
    return 0


def describe_transaction(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        (described,) = admin.describe_transactions([args.transactional_id])
    started = described.start_time_ms
    duration = "None" if started < 0 else max(0, int(time.time() * 1000) - started)
    print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
                [[described.coordinator_id, described.transactional_id, described.producer_id,
                  described.producer_epoch, described.state, described.timeout_ms,
                  "None" if started < 0 else started, duration,
                  ",".join(f"{topic}-{partition}" for topic, partition in described.topic_partitions)]])
    return 0
