"""`python -m mirror`: copy whitelisted topics of datacenter clusters into the offline cluster (`run`, also what a
command line without a subcommand means); `lineage`: where a target record came from.

    python -m mirror --source dc1=zk:2181/dc1 --source dc2=zk:2181/dc2 --target zk:2181/offline --whitelist 'events.*'
    python -m mirror run --source-bootstrap-server dc3=b1:9092,b2:9092 --state-dir var/mirror --target zk:2181/offline ...
    python -m mirror --config mirror.properties
    python -m mirror lineage TOPIC PARTITION OFFSET --target zk:2181/offline

Options on the command line override ``--set``, which overrides the properties file. SIGTERM or SIGINT stops it:
what is in flight is acknowledged, the offsets committed, the groups left, and it exits 0. Errors are one line on
stderr; exit codes: 0 success, 1 the mirror stopped on an error (or the lineage lookup found none), 2 wrong settings.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from pipeline.client.errors import KafkaClientError
from pipeline.config import Config
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.security.command_config import add_command_config_option
from pipeline.service import (Service, add_settings_options, command_line, fail, parse, run_threaded, runner,
                              serving_metrics, settings_values)

PROG = "python -m mirror"

# Command-line options and the setting each one sets.
_OPTIONS = {"state_dir": "state.dir", "target": "target.zookeeper.connect", "target_bootstrap_server": "target.bootstrap.servers",
            "whitelist": "whitelist", "blacklist": "blacklist", "group": "group.id", "num_streams": "num.streams",
            "metrics_port": "metrics.port", "metrics_host": "metrics.host", "registry": "schema.registry.url"}


def _add_target(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--target", metavar="HOST:PORT[/CHROOT]", help="the target (offline) cluster's ZooKeeper")
    where.add_argument("--target-bootstrap-server", metavar="HOST:PORT[,...]", help="the target cluster's brokers")


def add_run_parser(subparsers: Any) -> None:
    """``run``: mirror until SIGTERM or SIGINT."""
    parser = subparsers.add_parser(
        "run", help="mirror the source clusters into the target (the default command)",
        description="Mirror every whitelisted topic of one or more source clusters into a target cluster, at least "
                    "once (or exactly once with --set exactly.once=true), with the lineage of every record in its "
                    f"headers. `{PROG} lineage --help`: where a target record came from.")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=HOST:PORT[/CHROOT]",
                        help="a source cluster by name and ZooKeeper (repeat for several)")
    parser.add_argument("--source-bootstrap-server", action="append", default=[], metavar="NAME=HOST:PORT[,...]",
                        help="a source cluster by name and brokers (repeat for several): this process reads all "
                             "of its partitions, offsets kept under --state-dir")
    parser.add_argument("--state-dir", metavar="DIR", help="the mirror's state: the quarantine of records the target "
                                                           "refuses, the offsets of sources given by brokers")
    _add_target(parser)
    parser.add_argument("--whitelist", metavar="REGEX", help="topics to mirror (whole names; a comma means or)")
    parser.add_argument("--blacklist", metavar="REGEX", help="topics never mirrored")
    parser.add_argument("--group", help="consumer group of the mirror processes (default mirror)")
    parser.add_argument("--num-streams", type=int, help="stream threads per source (default 1)")
    parser.add_argument("--skip-lost-offsets", action="store_true",
                        help="skip offsets the source's retention deleted before they were mirrored (counted and "
                             "reported) instead of stopping")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    parser.add_argument("--metrics-host", metavar="ADDRESS",
                        help="address the metrics server listens on (default 0.0.0.0)")
    parser.add_argument("--registry", metavar="URL", help="schema registry for the audit counts")
    parser.add_argument("--no-audit", action="store_true", help="publish no tier-mirror audit counts")
    add_settings_options(parser, set_help="any other setting of --help-config; producer.* and consumer.* pass through")
    parser.set_defaults(command=run)


def load_config(args: argparse.Namespace) -> Config:
    from mirror.config import MirrorConfig

    values = settings_values(args, _OPTIONS)
    if args.source:
        values["source.clusters"] = ",".join(args.source)
    if args.source_bootstrap_server:
        values["source.bootstrap.servers"] = ",".join(args.source_bootstrap_server)
    # The command line picks the target: one kind replaces the file's other kind.
    if args.target:
        values.pop("target.bootstrap.servers", None)
    if args.target_bootstrap_server:
        values.pop("target.zookeeper.connect", None)
    if args.skip_lost_offsets:
        values["skip.lost.offsets"] = "true"
    if args.no_audit:
        values["audit.enable"] = "false"
    return MirrorConfig(values)


def mirror(config: Config, stop: threading.Event) -> int:
    """Run the mirror until ``stop``; report the offsets the sources' retention made it skip."""
    from mirror.service import MirrorService

    service = MirrorService(config)
    with serving_metrics(service.metrics.registry, config["metrics.host"], config["metrics.port"]):
        service.run(stop)
    if service.gaps:
        lost = sum(g.lost for g in service.gaps)
        print(f"{PROG}: {lost} offsets lost to the sources' retention were skipped: "
              + "; ".join(f"{g.where.source} {g.where.topic}-{g.where.partition} {g.start}..{g.end - 1}"
                          for g in service.gaps), file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    from kazoo.exceptions import KazooException

    from mirror.config import MIRROR_PROPERTIES
    from mirror.service import MirrorError
    from mirror.topics import MirrorTopicError
    from schemas.registry_client import SchemaRegistryError

    service = Service(PROG, MIRROR_PROPERTIES, load_config,
                      (MirrorError, MirrorTopicError, SchemaRegistryError, KafkaClientError, KafkaProtocolError,
                       KazooException, OSError))
    return run_threaded(service, args, mirror)


def add_lineage_parser(subparsers: Any) -> None:
    """``lineage``: the source of one target record."""
    parser = subparsers.add_parser("lineage", help="where a record of the target cluster came from",
                                   description="Where a record of the target cluster came from: its source "
                                               "cluster, partition and offset (from its lineage headers).")
    parser.add_argument("topic")
    parser.add_argument("partition", type=int)
    parser.add_argument("offset", type=int)
    add_command_config_option(parser)
    _add_target(parser)
    parser.set_defaults(command=lineage, parser=parser)


def lineage(args: argparse.Namespace) -> int:
    if not args.target and not args.target_bootstrap_server:
        args.parser.error("give the target cluster: --target ZOOKEEPER or --target-bootstrap-server BROKERS")
    from pipeline.client.cluster import Cluster, StaticBrokerList
    from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery

    from pipeline.lineage import look_up
    from pipeline.security.command_config import read_command_config

    try:
        discovery: Any = (ZooKeeperBrokerDiscovery(args.target) if args.target
                          else StaticBrokerList(args.target_bootstrap_server))
        cluster = Cluster(discovery, client_id="mirror-lineage", security=read_command_config(args.command_config).client)
        try:
            found = look_up(cluster, args.topic, args.partition, args.offset)
        finally:
            cluster.close()
            close = getattr(discovery, "close", None)
            if close is not None:
                close()
    except (LookupError, KafkaClientError, KafkaProtocolError, ValueError, OSError) as error:
        return fail(f"{PROG} lineage", error, 1)
    if found is None:
        return fail(f"{PROG} lineage", f"{args.topic}-{args.partition}@{args.offset} has no lineage headers "
                                       f"(it was not mirrored)", 1)
    print(f"source={found.cluster} topic={found.topic} partition={found.partition} offset={found.offset}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    return command_line(PROG, "Mirror topics of datacenter clusters into the offline cluster, at least once or "
                              "exactly once, with the lineage of every record (`run`, the default), and look a record's lineage up.",
                        (add_run_parser, add_lineage_parser))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return parse(build_parser(), argv)


def main(argv: list[str] | None = None) -> int:
    return runner.main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
