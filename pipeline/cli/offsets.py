"""`python -m pipeline offsets TOPIC`: a partition's offset for a time, as topic:partition:offset lines.

The output is Kafka's GetOffsetShell format; for a time in ms with no message that recent, the offset
is left empty (``topic:0:``), as GetOffsetShell does.
"""

from __future__ import annotations

import argparse

from pipeline.cli.common import non_negative_int, open_admin, require_partitions
from pipeline.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP


def offset_time(text: str) -> int:
    """argparse type for --time: earliest, latest, -1, -2 or a timestamp in ms."""
    named = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}
    if text.lower() in named:
        return named[text.lower()]
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected earliest, latest or a time in ms, got {text!r}") from None
    if value < EARLIEST_TIMESTAMP:
        raise argparse.ArgumentTypeError(f"expected earliest (-2), latest (-1) or a time in ms, got {value}")
    return value


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `offsets`."""
    parser = subparsers.add_parser(
        "offsets", parents=[common], help="print offsets of a topic's partitions (earliest, latest or by time)",
        description="Print topic:partition:offset for each partition (like kafka-get-offsets.sh): the first "
                    "offset (earliest), the log end offset (latest), or the first offset of a message with a "
                    "timestamp at or after a time in ms (empty when there is none).")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--partition", "--partitions", dest="partition", type=non_negative_int, metavar="P",
                        help="only this partition (default: all)")
    parser.add_argument("--time", type=offset_time, default=LATEST_TIMESTAMP, metavar="earliest|latest|MS",
                        help="which offset (default: latest)")
    parser.set_defaults(command=print_offsets, prog=parser.prog)


def print_offsets(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        partitions = require_partitions(admin.cluster, args.topic, args.partition)
        offsets = admin.list_offsets(args.topic, partitions, args.time)
    for partition, offset in offsets.items():
        print(f"{args.topic}:{partition}:{'' if offset is None else offset}")
    return 0
