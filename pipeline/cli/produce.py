"""`python -m pipeline produce TOPIC`: send lines from stdin or a file as messages (like kafka-console-producer).

Each line (without its newline) is one message. With a key separator (``--key-separator SEP``, or Kafka's
``--property parse.key=true --property key.separator=SEP``) the text before the first SEP is the key.
Input is read in large blocks and each block's complete lines are sent together, so piped files go out
in full batches while lines typed at a terminal are sent as soon as they are entered.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import BinaryIO, Iterator

from pipeline.cli.common import (
    CliError,
    EXIT_INTERRUPTED,
    broker_addresses,
    command_config,
    key_value,
    non_negative_int,
    open_cluster,
    positive_int,
    require_partitions,
    topic_argument,
)
from pipeline.cli.progress import Progress, Throttle, summary
from pipeline.client.partitioner import Partitioner
from pipeline.client.producer import CallbackHandler, ProducerBatch, ProduceResult, Producer, ProducerData
from pipeline.config import parse_bool

READ_BLOCK_BYTES = 1 << 16
COMPRESSION_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def acks_value(text: str) -> int:
    """argparse type for --acks: 0, 1, -1 or all."""
    value = text.strip().lower()
    if value in ("all", "-1"):
        return -1
    if value in ("0", "1"):
        return int(value)
    raise argparse.ArgumentTypeError(f"expected 0, 1, -1 or all, got {text!r}")


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `produce`."""
    parser = subparsers.add_parser(
        "produce", parents=[common], help="send lines from stdin or a file as messages",
        description="Send each input line as one message (like kafka-console-producer.sh). Prints a summary "
                    "(count, elapsed, msg/s) on stderr, and a live counter when stderr is a terminal.")
    parser.add_argument("topic", metavar="TOPIC", nargs="?", help="topic to send to (or --topic)")
    parser.add_argument("--topic", dest="topic_option", metavar="TOPIC", help=argparse.SUPPRESS)
    parser.add_argument("--file", metavar="F", help="read lines from this file instead of stdin")
    parser.add_argument("--key-separator", metavar="SEP",
                        help="each line is KEY SEP VALUE, split at the first SEP (the key partitions the message)")
    parser.add_argument("--property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="Kafka's console producer reader properties: parse.key=true, key.separator=SEP "
                             "(default tab), ignore.error=true (a line without separator becomes a keyless "
                             "message instead of an error)")
    parser.add_argument("--partition", type=non_negative_int, metavar="P",
                        help="send every message to this partition (default: by key, random without key)")
    parser.add_argument("--acks", "--request-required-acks", dest="acks", type=acks_value, default=1,
                        metavar="0|1|all", help="acknowledgements to wait for (default: 1)")
    parser.add_argument("--compression-codec", choices=COMPRESSION_CODECS, default="none",
                        help="compress each batch with this codec (default: none)")
    parser.add_argument("--batch-size", type=positive_int, default=200, metavar="N",
                        help="messages per batch (default: 200)")
    parser.add_argument("--timeout", dest="linger_ms", type=non_negative_int, default=1000, metavar="MS",
                        help="async: longest time a message waits for its batch to fill (default: 1000)")
    parser.add_argument("--sync", action="store_true",
                        help="send each batch synchronously and wait for its acknowledgement (default: async)")
    parser.add_argument("--throughput", type=float, default=0.0, metavar="MSGS_PER_S",
                        help="hold the send rate to about this many messages per second (default: unlimited)")
    parser.add_argument("--producer-property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="any producer property, e.g. queue.buffering.max.messages=50000 (repeatable)")
    parser.set_defaults(command=produce, prog=parser.prog)


class FixedPartitioner(Partitioner):
    """Sends everything to one partition (--partition)."""

    def __init__(self, partition: int) -> None:
        self.fixed = partition

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        return self.fixed


class FailureCounter(CallbackHandler):
    """Callback handler for the async producer: counts the messages of batches that failed."""

    def __init__(self) -> None:
        self.failed = 0
        self.first_error: BaseException | None = None
        self._lock = threading.Lock()

    def after_send(self, batch: ProducerBatch, result: ProduceResult | BaseException) -> None:
        if isinstance(result, BaseException):
            with self._lock:
                self.failed += batch.count
                if self.first_error is None:
                    self.first_error = result


def read_line_blocks(stream: BinaryIO) -> Iterator[list[bytes]]:
    """The complete lines of each block read from ``stream`` (a final unterminated line counts too).

    ``os.read`` returns what is available, so a terminal yields each line as it is typed and a file or
    pipe yields up to READ_BLOCK_BYTES of lines at once. A trailing ``\\r`` is removed like ``\\n``.
    """
    fd = stream.fileno()
    pending = b""
    while True:
        data = os.read(fd, READ_BLOCK_BYTES)
        if not data:
            if pending:
                yield [pending[:-1] if pending.endswith(b"\r") else pending]
            return
        if pending:
            data = pending + data
        lines = data.split(b"\n")
        pending = lines.pop()
        if lines:
            if b"\r" in data:
                lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
            yield lines


class KeyParser:
    """Splits ``KEY SEP VALUE`` lines; lines without SEP are an error unless ignore.error is set."""

    def __init__(self, separator: bytes, ignore_error: bool) -> None:
        self.separator = separator
        self.ignore_error = ignore_error
        self.line_number = 0

    def runs(self, lines: list[bytes]) -> Iterator[tuple[bytes | None, list[bytes]]]:
        """(key, values) for each run of consecutive lines with the same key."""
        separator = self.separator
        run_key: bytes | None = None
        run: list[bytes] = []
        for line in lines:
            self.line_number += 1
            key, sep, value = line.partition(separator)
            if not sep:
                if not self.ignore_error:
                    raise CliError(f"no key separator {separator.decode(errors='replace')!r} found on line "
                                   f"number {self.line_number}")
                key, value = None, line  # type: ignore[assignment]
            if run and key != run_key:
                yield run_key, run
                run = []
            run_key = key
            run.append(value)
        if run:
            yield run_key, run


def key_parsing(args: argparse.Namespace) -> KeyParser | None:
    """The key parser the options ask for, or None when lines are plain values."""
    properties = dict(args.property)
    unknown = set(properties) - {"parse.key", "key.separator", "ignore.error"}
    if unknown:
        raise CliError(f"unknown --property {sorted(unknown)[0]!r} (known: parse.key, key.separator, ignore.error)",
                       exit_code=2)
    try:
        parse_key = parse_bool(properties.get("parse.key", "false"))
        ignore_error = parse_bool(properties.get("ignore.error", "false"))
    except ValueError as exc:
        raise CliError(f"--property: {exc}", exit_code=2) from None
    separator = args.key_separator
    if separator is None and parse_key:
        separator = properties.get("key.separator", "\t")
    if separator is None:
        return None
    if separator == "":
        raise CliError("the key separator must not be empty", exit_code=2)
    return KeyParser(separator.encode(), ignore_error)


def producer_config(args: argparse.Namespace) -> dict:
    """The Producer properties for these options (--producer-property last, so it wins)."""
    config = {
        "metadata.broker.list": broker_addresses(args),
        "client.id": "pipeline-cli-producer",
        "producer.type": "sync" if args.sync else "async",
        "request.required.acks": args.acks,
        "compression.codec": args.compression_codec,
        "batch.size": args.batch_size,
        "queue.time": args.linger_ms,
        "connect.timeout.ms": args.command_timeout_ms,
        **command_config(args).values,
    }
    if args.partition is not None:
        config["partitioner.class"] = FixedPartitioner(args.partition)
    config.update(dict(args.producer_property))
    return config


def produce(args: argparse.Namespace) -> int:
    topic = topic_argument(args, "produce")
    parser = key_parsing(args)
    # Fail fast, with one clear line, when the broker is unreachable or the topic or partition is missing.
    cluster = open_cluster(args)
    try:
        require_partitions(cluster, topic, args.partition)
    finally:
        cluster.close()
    try:
        source = open(args.file, "rb") if args.file else sys.stdin.buffer
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None

    failures = FailureCounter()
    producer = Producer(producer_config(args), callback_handler=failures)
    throttle = Throttle(args.throughput) if args.throughput > 0 else None
    # With a target rate, messages go out one by one so the rate holds at any batch size.
    chunk = 1 if throttle else args.batch_size
    started = time.monotonic()
    interrupted = False
    try:
        with Progress("produced") as progress:
            try:
                for lines in read_line_blocks(source):
                    runs = parser.runs(lines) if parser else ((None, lines),)
                    for key, values in runs:
                        for start in range(0, len(values), chunk):
                            if throttle:
                                throttle.wait(progress.count)
                            messages = values[start:start + chunk]
                            producer.send(ProducerData(topic, key, messages))
                            progress.count += len(messages)
            except KeyboardInterrupt:
                # Stop reading; what was accepted so far is still sent by close() below.
                interrupted = True
    finally:
        producer.close()
        if source is not sys.stdin.buffer:
            source.close()
    elapsed = time.monotonic() - started
    sent = progress.count - failures.failed
    print(summary("produced", sent, elapsed), file=sys.stderr)
    if failures.failed:
        raise CliError(f"{failures.failed} of {progress.count} messages were not delivered: {failures.first_error}")
    return EXIT_INTERRUPTED if interrupted else 0
