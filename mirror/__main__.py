"""`python -m mirror`: copy whitelisted topics of datacenter clusters into the offline cluster; `lineage`.

    python -m mirror --source dc1=zk:2181/dc1 --source dc2=zk:2181/dc2 --target zk:2181/offline --whitelist 'events.*'
    python -m mirror --source-bootstrap-server dc3=b1:9092,b2:9092 --state-dir var/mirror --target zk:2181/offline ...
    python -m mirror --config mirror.properties
    python -m mirror lineage TOPIC PARTITION OFFSET --target zk:2181/offline

Options on the command line override the properties file. SIGTERM or SIGINT stops it: what is in flight is
acknowledged, the offsets committed, the groups left, and it exits 0. Errors are one line on stderr; exit
codes: 0 success, 1 the mirror stopped on an error (or the lineage lookup found none), 2 wrong settings.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pipeline.client.errors import KafkaClientError
from pipeline.config import ConfigError, command_line_values, help_table
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.service import log_to_stderr, stop_on_signals, write_owner_only

PROG = "python -m mirror"

# Command-line options and the setting each one sets.
_OPTIONS = {"state_dir": "state.dir", "target": "target.zookeeper.connect", "target_bootstrap_server": "target.bootstrap.servers",
            "whitelist": "whitelist", "blacklist": "blacklist", "group": "group.id", "num_streams": "num.streams",
            "metrics_port": "metrics.port", "metrics_host": "metrics.host", "registry": "schema.registry.url"}


def _add_target(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--target", metavar="HOST:PORT[/CHROOT]", help="the target (offline) cluster's ZooKeeper")
    where.add_argument("--target-bootstrap-server", metavar="HOST:PORT[,...]", help="the target cluster's brokers")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Mirror every whitelisted topic of one or more source clusters into a target "
                               "cluster, at least once, with the lineage of every record in its headers. "
                               f"`{PROG} lineage --help`: where a target record came from.")
    parser.add_argument("--config", metavar="FILE", help="properties file (see --help-config)")
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
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other setting of --help-config; producer.* and consumer.* pass through")
    parser.add_argument("--help-config", action="store_true", help="list every setting and exit")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> Any:
    from mirror.config import MirrorConfig

    values = command_line_values(args.config, args.set, {name: getattr(args, option)
                                                         for option, name in _OPTIONS.items()})
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


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.help_config:
        from mirror.config import MIRROR_PROPERTIES
        print(help_table(MIRROR_PROPERTIES))
        return 0
    write_owner_only()
    try:
        config = load_config(args)
    except (ConfigError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    from kazoo.exceptions import KazooException
    from prometheus_client import start_http_server

    from mirror.service import MirrorError, MirrorService
    from mirror.topics import MirrorTopicError
    from schemas.registry_client import SchemaRegistryError

    stop = stop_on_signals()
    service = MirrorService(config)
    server = None
    try:
        if config["metrics.port"] is not None:
            server, _ = start_http_server(config["metrics.port"], addr=config["metrics.host"],
                                          registry=service.metrics.registry)
        service.run(stop)
    except (MirrorError, MirrorTopicError, SchemaRegistryError, KafkaClientError, KafkaProtocolError,
            KazooException, ConfigError, OSError) as error:
        print(f"{PROG}: error: {str(error) or type(error).__name__}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    if service.gaps:
        lost = sum(g.lost for g in service.gaps)
        print(f"{PROG}: {lost} offsets lost to the sources' retention were skipped: "
              + "; ".join(f"{g.where.source} {g.where.topic}-{g.where.partition} {g.start}..{g.end - 1}"
                          for g in service.gaps), file=sys.stderr)
    return 0


def lineage(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} lineage",
                                     description="Where a record of the target cluster came from: its source "
                                                 "cluster, partition and offset (from its lineage headers).")
    parser.add_argument("topic")
    parser.add_argument("partition", type=int)
    parser.add_argument("offset", type=int)
    _add_target(parser)
    args = parser.parse_args(argv)
    if not args.target and not args.target_bootstrap_server:
        parser.error("give the target cluster: --target ZOOKEEPER or --target-bootstrap-server BROKERS")
    from pipeline.client.cluster import Cluster, StaticBrokerList
    from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery

    from pipeline.lineage import look_up

    try:
        discovery: Any = (ZooKeeperBrokerDiscovery(args.target) if args.target
                          else StaticBrokerList(args.target_bootstrap_server))
        cluster = Cluster(discovery, client_id="mirror-lineage")
        try:
            found = look_up(cluster, args.topic, args.partition, args.offset)
        finally:
            cluster.close()
            close = getattr(discovery, "close", None)
            if close is not None:
                close()
    except (LookupError, KafkaClientError, KafkaProtocolError, ValueError, OSError) as error:
        print(f"{PROG} lineage: error: {error}", file=sys.stderr)
        return 1
    if found is None:
        print(f"{PROG} lineage: error: {args.topic}-{args.partition}@{args.offset} has no lineage headers "
              f"(it was not mirrored)", file=sys.stderr)
        return 1
    print(f"source={found.cluster} topic={found.topic} partition={found.partition} offset={found.offset}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    log_to_stderr()
    if argv and argv[0] == "lineage":
        return lineage(argv[1:])
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
