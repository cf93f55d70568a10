"""`python -m pipeline consume TOPIC`: print messages of a topic (like kafka-console-consumer).

Reads all partitions of the topic (or one with --partition) from the end, from the beginning, or from
an offset of one partition; or, with --group and --zookeeper, as a member of a ZooKeeper consumer group
(the paper's high-level consumer: the group shares the partitions, offsets are committed on exit).
Stops after --max-messages, after --timeout-ms without a message, or on Ctrl-C. Prints a summary (count, elapsed, msg/s) on stderr, and a live counter when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Iterator

from pipeline.cli.common import (
    CliError,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    broker_addresses,
    command_config,
    key_value,
    non_negative_int,
    open_admin,
    positive_int,
    require_partitions,
    topic_argument,
)
from pipeline.cli.output import FORMATS, PeriodicFlusher, formatter
from pipeline.cli.progress import Progress, summary
from pipeline.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from pipeline.client.consumer import Consumer
from pipeline.client.consumer_connector import ConsumerConnector, ConsumerTimeout, KafkaStream

OUTPUT_BUFFER_BYTES = 1 << 16


def start_offset(text: str) -> int | str:
    """argparse type for --offset: a non-negative offset, earliest or latest."""
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an offset, earliest or latest, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset must not be negative, got {value}")
    return value


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `consume`."""
    parser = subparsers.add_parser(
        "consume", parents=[common], help="print messages of a topic",
        description="Print the messages of a topic, one a line (like kafka-console-consumer.sh). Without "
                    "--from-beginning or --offset it starts at the end and waits for new messages.",
        epilog="--format json prints one object per message with topic, partition, offset, timestamp (ms), "
               "key, value and headers; keys and values are UTF-8 text, undecodable bytes appear as \\xNN "
               "escapes and null stays null. --format value writes the raw bytes of each value.")
    parser.add_argument("topic", metavar="TOPIC", nargs="?", help="topic to read (or --topic)")
    parser.add_argument("--topic", dest="topic_option", metavar="TOPIC", help=argparse.SUPPRESS)
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offset of each partition")
    parser.add_argument("--partition", type=non_negative_int, metavar="P", help="read only this partition")
    parser.add_argument("--offset", type=start_offset, metavar="O",
                        help="start at offset O (or earliest/latest) of --partition")
    parser.add_argument("--group", metavar="GROUP",
                        help="read as a member of this ZooKeeper consumer group (needs --zookeeper): the group "
                             "shares the partitions and continues from its committed offsets, which are "
                             "committed again on exit; --from-beginning then applies to a group with none")
    parser.add_argument("--max-messages", type=positive_int, metavar="N", help="exit after N messages")
    parser.add_argument("--timeout-ms", type=positive_int, metavar="MS",
                        help="exit when no message arrived for MS milliseconds (default: wait forever)")
    parser.add_argument("--format", choices=FORMATS, default="value", help="output format (default: value)")
    parser.add_argument("--key-separator", default="\t", metavar="SEP",
                        help="between key and value in --format key-value (default: tab)")
    parser.add_argument("--property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="Kafka's console consumer formatter properties: print.key=true (same as "
                             "--format key-value), key.separator=SEP")
    parser.add_argument("--consumer-property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="any consumer property, e.g. fetch.size=1048576 (repeatable)")
    parser.set_defaults(command=consume, prog=parser.prog)


def output_options(args: argparse.Namespace) -> tuple[str, bytes]:
    """(format, key separator) from --format/--key-separator and Kafka's --property spellings."""
    properties = dict(args.property)
    unknown = set(properties) - {"print.key", "key.separator"}
    if unknown:
        raise CliError(f"unknown --property {sorted(unknown)[0]!r} (known: print.key, key.separator)", exit_code=2)
    fmt = args.format
    if properties.get("print.key", "false").strip().lower() == "true" and fmt == "value":
        fmt = "key-value"
    separator = properties.get("key.separator", args.key_separator)
    return fmt, separator.encode()


def starting_positions(args: argparse.Namespace, topic: str) -> dict[tuple[str, int], int | str]:
    """{(topic, partition): offset or "earliest"/"latest"} for the Consumer; checks topic, partition, offset."""
    if args.offset is not None and args.partition is None:
        raise CliError("--offset needs --partition", exit_code=2)
    if args.offset is not None and args.from_beginning:
        raise CliError("give either --offset or --from-beginning, not both", exit_code=2)
    with open_admin(args) as admin:
        partitions = require_partitions(admin.cluster, topic, args.partition)
        if isinstance(args.offset, int):
            earliest = admin.list_offsets(topic, partitions, EARLIEST_TIMESTAMP)[args.partition]
            latest = admin.list_offsets(topic, partitions, LATEST_TIMESTAMP)[args.partition]
            if earliest is not None and latest is not None and not earliest <= args.offset <= latest:
                raise CliError(f"offset {args.offset} is outside the log of {topic}-{args.partition} "
                               f"(offsets {earliest} to {latest})")
            return {(topic, args.partition): args.offset}
    where: int | str = args.offset or ("earliest" if args.from_beginning else "latest")
    return {(topic, p): where for p in partitions}


def consumer_config(args: argparse.Namespace) -> dict:
    """The Consumer properties for these options (--consumer-property last, so it wins)."""
    config = {
        "metadata.broker.list": broker_addresses(args),
        "client.id": "pipeline-cli-consumer",
        "consumer.timeout.ms": args.timeout_ms if args.timeout_ms is not None else -1,
        "socket.timeout.ms": args.command_timeout_ms,
        **command_config(args).values,
    }
    config.update(dict(args.consumer_property))
    return config


def consume(args: argparse.Namespace) -> int:
    topic = topic_argument(args, "consume")
    fmt, key_separator = output_options(args)
    format_message = formatter(fmt, key_separator)
    limit = args.max_messages
    # Our own block buffer on fd 1: sys.stdout.buffer is unbuffered under PYTHONUNBUFFERED=1, which would
    # cost one system call per message. The flusher thread keeps a slow trickle of messages visible.
    sys.stdout.flush()
    out = open(sys.stdout.fileno(), "wb", buffering=OUTPUT_BUFFER_BYTES, closefd=False)
    write = out.write
    consumer: Consumer | ConsumerConnector
    stream: KafkaStream | None = None
    if args.group:
        consumer, stream = group_messages(args, topic)
        messages = _until_idle(stream)
    else:
        consumer = Consumer(consumer_config(args), partitions=starting_positions(args, topic))
        messages = iter(consumer)
    started = time.monotonic()
    count = 0
    interrupted = False
    try:
        with Progress("consumed") as progress, PeriodicFlusher(out):
            try:
                for message in messages:
                    write(format_message(message))
                    count += 1
                    progress.count = count
                    if count == limit:
                        break
            except KeyboardInterrupt:
                interrupted = True
        out.flush()
        if stream is not None:
            # Everything handed out is written: the group may commit past the last message too.
            stream.acknowledge()
    finally:
        if isinstance(consumer, ConsumerConnector):
            consumer.shutdown()
        else:
            consumer.close()
        out.close()
    print(summary("consumed", count, time.monotonic() - started), file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else 0


def group_messages(args: argparse.Namespace, topic: str) -> tuple[ConsumerConnector, KafkaStream]:
    """A ConsumerConnector in group --group with one stream on ``topic``, and that stream."""
    if not args.zookeeper:
        raise CliError("--group needs --zookeeper HOST:PORT/CHROOT (consumer groups live in ZooKeeper)",
                       exit_code=EXIT_USAGE)
    if args.partition is not None or args.offset is not None:
        raise CliError("--group shares the topic's partitions: it cannot take --partition or --offset",
                       exit_code=EXIT_USAGE)
    with open_admin(args) as admin:
        require_partitions(admin.cluster, topic, None)
    config = {
        "zookeeper.connect": args.zookeeper,
        "group.id": args.group,
        "auto.offset.reset": "smallest" if args.from_beginning else "largest",
        "consumer.timeout.ms": args.timeout_ms if args.timeout_ms is not None else -1,
        "socket.timeout.ms": args.command_timeout_ms,
        **command_config(args).values,
        **command_config(args).zookeeper_values,
    }
    config.update(dict(args.consumer_property))
    connector = ConsumerConnector(config)
    try:
        stream = connector.create_message_streams({topic: 1})[topic][0]
    except BaseException:
        connector.shutdown()
        raise
    return connector, stream


def _until_idle(stream: Iterator) -> Iterator:
    """The stream's messages, ending quietly at consumer.timeout.ms (the connector raises ConsumerTimeout)."""
    try:
        yield from stream
    except ConsumerTimeout:
        return
