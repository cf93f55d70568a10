"""What every subcommand shares: the --bootstrap-server and --command-config options, exit codes, and turning errors
into one line.

Exit codes (documented in ``python -m pipeline --help``):
  0  success
  1  the broker refused the request (unknown topic, topic already exists, invalid partitions, ...)
     or the operation failed (a file cannot be read, messages could not be delivered)
  2  wrong arguments (argparse's convention)
  3  no broker (or no ZooKeeper, with --zookeeper) can be reached
  130 interrupted (Ctrl-C); 141 stdout closed by the reader (e.g. ``| head``)
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList, parse_broker_list
from pipeline.client.errors import KafkaClientError, KafkaConnectionError, UnknownTopicError
from pipeline.config import ConfigError
from pipeline.error_text import describe_error
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.security.command_config import CommandConfig, add_command_config_option, read_command_config
from pipeline.zk.client import ZooKeeperTimeout, ZooKeeperUnavailable, connect, split_connect_string
from pipeline.zk.registry import ClusterRegistry

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

BOOTSTRAP_ENV = "PIPELINE_BOOTSTRAP_SERVER"
ZOOKEEPER_ENV = "PIPELINE_ZOOKEEPER"
COMMAND_CONFIG_ENV = "PIPELINE_COMMAND_CONFIG"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
CLIENT_ID = "pipeline-cli"

EXIT_CODES_HELP = """exit codes:
  0    success
  1    the broker refused the request (unknown topic, topic exists, ...) or the work failed
  2    wrong arguments
  3    no broker reachable at --bootstrap-server (or no ZooKeeper at --zookeeper)
  130  interrupted (Ctrl-C)"""


class CliError(Exception):
    """An expected failure: printed as one line on stderr, then the process exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def bootstrap_address(text: str) -> str:
    """argparse type for --bootstrap-server: a ``host:port[,host:port]`` list, checked early."""
    try:
        parse_broker_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def zookeeper_address(text: str) -> str:
    """argparse type for --zookeeper: ``host:port[,host:port...][/chroot]``, checked early."""
    try:
        split_connect_string(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_connection_options(parser: argparse.ArgumentParser, *, with_defaults: bool) -> None:
    """--bootstrap-server and --command-timeout-ms, on the top-level parser and on every subcommand.

    Only the top level holds the defaults (the subcommands' copies are SUPPRESSed), so the options work
    before the subcommand (``python -m pipeline --bootstrap-server H:P topics list``) and after it.
    """
    group = parser.add_argument_group("connection")
    group.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", metavar="HOST:PORT",
                       type=bootstrap_address,
                       default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP) if with_defaults else argparse.SUPPRESS,
                       help=f"broker(s) to connect to, host:port[,host:port...] (default: ${BOOTSTRAP_ENV} "
                            f"or {DEFAULT_BOOTSTRAP})")
    group.add_argument("--zookeeper", dest="zookeeper", metavar="HOST:PORT/CHROOT", type=zookeeper_address,
                       default=os.environ.get(ZOOKEEPER_ENV) if with_defaults else argparse.SUPPRESS,
                       help=f"find the brokers through the cluster's ZooKeeper registry instead of "
                            f"--bootstrap-server (default: ${ZOOKEEPER_ENV}); needed by cluster and the paper's "
                            "consumer groups")
    add_command_config_option(group, os.environ.get(COMMAND_CONFIG_ENV) if with_defaults else argparse.SUPPRESS)
    group.add_argument("--command-timeout-ms", dest="command_timeout_ms", type=positive_int,
                       default=10000 if with_defaults else argparse.SUPPRESS,
                       metavar="MS", help="socket timeout for each broker request (default: 10000)")


def common_options() -> argparse.ArgumentParser:
    """A parent parser with the options every subcommand takes (added to each leaf parser)."""
    parent = argparse.ArgumentParser(add_help=False)
    add_connection_options(parent, with_defaults=False)
    return parent


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def int_arg(text: str) -> int:
    """argparse type: any integer, with a readable message."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``key=value`` options (--config, --property, --producer-property)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def topic_argument(args: argparse.Namespace, command: str) -> str:
    """The topic given as TOPIC or --topic (Kafka's tools use the option); both must agree."""
    topic = args.topic or args.topic_option
    if not topic:
        raise CliError(f"a topic is required ({command} TOPIC)", exit_code=2)
    if args.topic and args.topic_option and args.topic != args.topic_option:
        raise CliError("two different topics given (TOPIC and --topic)", exit_code=2)
    return topic


def open_zookeeper(args: argparse.Namespace) -> KazooClient:
    """A kazoo client rooted at --zookeeper's chroot; CliError when the option is missing."""
    if not args.zookeeper:
        raise CliError("this command reads the cluster's ZooKeeper registry: give --zookeeper HOST:PORT/CHROOT",
                       exit_code=EXIT_USAGE)
    return connect(args.zookeeper, timeout_s=args.command_timeout_ms / 1000,
                   security=command_config(args).zookeeper)


def command_config(args: argparse.Namespace) -> CommandConfig:
    """The settings of --command-config (read once per command line)."""
    found = getattr(args, "_command_config", None)
    if found is None:
        path = getattr(args, "command_config", None)
        try:
            found = read_command_config(path)
        except OSError as exc:
            raise CliError(f"cannot read --command-config {path}: {exc.strerror or exc}") from None
        args._command_config = found
    return found


def broker_addresses(args: argparse.Namespace) -> str:
    """Where the brokers are: --bootstrap-server, or the brokers registered under --zookeeper."""
    if not args.zookeeper:
        return args.bootstrap_server
    zk = open_zookeeper(args)
    try:
        brokers = ClusterRegistry(zk, args.command_timeout_ms / 1000).brokers()
    finally:
        zk.stop()
        zk.close()
    if not brokers:
        raise CliError(f"no broker is registered in ZooKeeper at {args.zookeeper}", exit_code=EXIT_UNREACHABLE)
    return ",".join(f"{b.host}:{b.port}" for b in brokers.values())


def open_cluster(args: argparse.Namespace) -> Cluster:
    """A Cluster for --bootstrap-server (or --zookeeper) that has already answered one metadata request."""
    cluster = Cluster(StaticBrokerList(broker_addresses(args)), client_id=CLIENT_ID,
                      timeout_s=args.command_timeout_ms / 1000, security=command_config(args).client)
    try:
        cluster.refresh([])
    except BaseException:
        cluster.close()
        raise
    return cluster


def open_admin(args: argparse.Namespace) -> AdminClient:
    """An AdminClient owning its own connected Cluster."""
    cluster = open_cluster(args)
    return AdminClient(cluster, client_id=CLIENT_ID, timeout_s=args.command_timeout_ms / 1000, close_cluster=True)


def require_partitions(cluster: Cluster, topic: str, partition: int | None) -> list[int]:
    """The partitions of ``topic`` to work on (all, or just ``partition``); CliError if either is missing."""
    partitions = cluster.partitions_for(topic)
    if partition is None:
        return partitions
    if partition not in partitions:
        raise CliError(f"topic {topic!r} has no partition {partition} (partitions: 0-{len(partitions) - 1})")
    return [partition]


def print_table(header: list[str], rows: list[list[object]]) -> None:
    """Columns left-aligned and as wide as their widest cell, two spaces apart."""
    cells = [header] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def run_guarded(command: Callable[[argparse.Namespace], int], args: argparse.Namespace, prog: str) -> int:
    """Run a subcommand, turning the errors we expect into one line on stderr and an exit code."""
    try:
        return command(args)
    except CliError as exc:
        return fail(prog, str(exc), exc.exit_code)
    except UnknownTopicError as exc:
        return fail(prog, f"topic {exc.topic!r} does not exist", EXIT_FAILED)
    except KafkaProtocolError as exc:
        return fail(prog, describe_protocol_error(exc), EXIT_FAILED)
    except KafkaConnectionError as exc:
        where = f"registered in ZooKeeper at {args.zookeeper}" if args.zookeeper else f"at {args.bootstrap_server}"
        return fail(prog, f"cannot reach a broker {where} ({exc})", EXIT_UNREACHABLE)
    except ZooKeeperUnavailable as exc:
        return fail(prog, f"cannot reach ZooKeeper ({exc})", EXIT_UNREACHABLE)
    except ZooKeeperTimeout as exc:
        return fail(prog, str(exc), EXIT_UNREACHABLE)
    except ConnectionLoss as exc:
        return fail(prog, f"ZooKeeper did not answer ({describe_error(exc)})", EXIT_UNREACHABLE)
    except ConfigError as exc:
        return fail(prog, str(exc), EXIT_USAGE)
    except KafkaClientError as exc:
        return fail(prog, str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away: point stdout at /dev/null so the interpreter's final flush is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def describe_protocol_error(exc: KafkaProtocolError) -> str:
    """``TOPIC_ALREADY_EXISTS: topic 'x' already exists`` (the broker's message when it sent one)."""
    return f"{exc.code.name}: {exc.message}" if exc.message else exc.code.name


def fail(prog: str, message: str, exit_code: int) -> int:
    """Print ``prog: error: message`` (one line) on stderr and return ``exit_code``."""
    one_line = " ".join(message.split())
    print(f"{prog}: error: {one_line}", file=sys.stderr)
    return exit_code
