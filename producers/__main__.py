"""`python -m producers`: emulate the frontend servers of one datacenter publishing Avro events.

    python -m producers --datacenter dc1 --bootstrap-server localhost:9092 --servers 10 --rate 2000
    python -m producers --config config/producers-dc1.properties --duration 60

Options given on the command line override the properties file. SIGTERM or SIGINT stops it: what is
queued is sent, the audit counts of the open windows are published, and it exits 0. Errors are one line.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.client.errors import KafkaClientError
from pipeline.config import ConfigError, command_line_values, help_table
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.service import log_to_stderr, stop_on_signals, write_owner_only
from producers.config import EMULATOR_PROPERTIES, EmulatorConfig
from schemas.registry_client import SchemaRegistryError

# Command-line options and the property each one sets.
_OPTIONS = {
    "datacenter": "datacenter", "bootstrap_server": "bootstrap.servers", "zookeeper": "zookeeper.connect",
    "registry": "schema.registry.url", "servers": "servers", "rate": "rate", "duration": "duration.s",
    "seed": "seed", "members": "members", "metrics_port": "metrics.port", "metrics_host": "metrics.host",
    "audit_window_ms": "audit.window.ms", "created_log": "created.log",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m producers",
        description="Emulate N frontend servers of one datacenter publishing Avro activity and operational "
                    "events to its Kafka cluster, with producer-tier audit counts.")
    parser.add_argument("--config", metavar="FILE", help="properties file (see --help-config)")
    parser.add_argument("--datacenter", help="datacenter name, e.g. dc1")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="brokers of the datacenter cluster")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="the cluster's ZooKeeper instead")
    parser.add_argument("--registry", metavar="URL", help="schema registry URL (default http://localhost:8081)")
    parser.add_argument("--servers", type=int, help="frontend servers to emulate (default 10)")
    parser.add_argument("--rate", type=float, help="events per second, all servers together (default 1000)")
    parser.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long (default: never)")
    parser.add_argument("--seed", type=int, help="seed of the workload's shape (default 0; event ids are unique "
                                                 "whatever the seed)")
    parser.add_argument("--members", type=int, help="members of the site (default 1000000)")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    parser.add_argument("--metrics-host", metavar="ADDRESS", help="address the metrics server listens on "
                                                                  "(default 0.0.0.0)")
    parser.add_argument("--created-log", metavar="FILE",
                        help="list every event created in FILE: <eventId> <topic> <eventTime ms> a line")
    parser.add_argument("--audit-window-ms", type=int, help="audit window of event time (default 60000)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other setting of --help-config")
    parser.add_argument("--help-config", action="store_true", help="list every setting and exit")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> EmulatorConfig:
    values = command_line_values(args.config, args.set, {name: getattr(args, option)
                                                         for option, name in _OPTIONS.items()})
    # The command line picks the source: a --bootstrap-server replaces the file's zookeeper.connect and back.
    if args.bootstrap_server:
        values.pop("zookeeper.connect", None)
    if args.zookeeper:
        values.pop("bootstrap.servers", None)
        values.pop("metadata.broker.list", None)
    return EmulatorConfig(values)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.help_config:
        print(help_table(EMULATOR_PROPERTIES))
        return 0
    write_owner_only()
    log_to_stderr()
    try:
        config = load_config(args)
    except (ConfigError, OSError) as error:
        print(f"producers: error: {error}", file=sys.stderr)
        return 2
    from producers.emulator import FrontendEmulator

    stop = stop_on_signals()
    try:
        FrontendEmulator(config).run(stop)
    except (SchemaRegistryError, KafkaClientError, KafkaProtocolError, ConfigError, OSError) as error:
        print(f"producers: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
