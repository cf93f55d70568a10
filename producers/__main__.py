"""`python -m producers [run]`: emulate the frontend servers of one datacenter publishing Avro events.

    python -m producers --datacenter dc1 --bootstrap-server localhost:9092 --servers 10 --rate 2000
    python -m producers run --config config/producers-dc1.properties --duration 60

Options given on the command line override ``--set``, which overrides the properties file. SIGTERM or SIGINT stops
it: what is queued is sent, the audit counts of the open windows are published, and it exits 0. Errors are one
line; exit codes: 0 success, 1 a runtime failure, 2 wrong settings.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from pipeline.client.errors import KafkaClientError
from pipeline.config import Config
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.service import Service, add_settings_options, command_line, run_threaded, runner, serving_metrics, \
    settings_values
from producers.config import EMULATOR_PROPERTIES, EmulatorConfig
from schemas.registry_client import SchemaRegistryError

PROG = "python -m producers"

# Command-line options and the property each one sets.
_OPTIONS = {
    "datacenter": "datacenter", "bootstrap_server": "bootstrap.servers", "zookeeper": "zookeeper.connect",
    "registry": "schema.registry.url", "servers": "servers", "rate": "rate", "duration": "duration.s",
    "seed": "seed", "members": "members", "metrics_port": "metrics.port", "metrics_host": "metrics.host",
    "audit_window_ms": "audit.window.ms", "created_log": "created.log",
}


def add_run_parser(subparsers: Any) -> None:
    """``run``: publish until SIGTERM, SIGINT or the duration's end."""
    parser = subparsers.add_parser(
        "run", help="emulate the frontend servers (the default command)",
        description="Emulate N frontend servers of one datacenter publishing Avro activity and operational events "
                    "to its Kafka cluster, with producer-tier audit counts.")
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
    add_settings_options(parser, set_help="any other setting of --help-config")
    parser.set_defaults(command=run)


def load_config(args: argparse.Namespace) -> EmulatorConfig:
    values = settings_values(args, _OPTIONS)
    # The command line picks the source: a --bootstrap-server replaces the file's zookeeper.connect and back.
    if args.bootstrap_server:
        values.pop("zookeeper.connect", None)
    if args.zookeeper:
        values.pop("bootstrap.servers", None)
        values.pop("metadata.broker.list", None)
    return EmulatorConfig(values)


def emulate(config: Config, stop: threading.Event) -> None:
    """Publish until ``stop`` (or the duration's end), serving the emulators' metrics meanwhile."""
    from producers.emulator import FrontendEmulator

    emulator = FrontendEmulator(config)
    with serving_metrics(emulator.metrics.registry, config["metrics.host"], config["metrics.port"]):
        emulator.run(stop)


def run(args: argparse.Namespace) -> int:
    service = Service(PROG, EMULATOR_PROPERTIES, load_config,
                      (SchemaRegistryError, KafkaClientError, KafkaProtocolError, OSError))
    return run_threaded(service, args, emulate)


def build_parser() -> argparse.ArgumentParser:
    return command_line(PROG, "Emulate the frontend servers of one datacenter publishing Avro events (`run`, the "
                              "default).", (add_run_parser,))


def main(argv: list[str] | None = None) -> int:
    return runner.main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
