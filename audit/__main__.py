"""`python -m audit`: the audit service (`run`), its reconciliation table (`report`), one event traced (`trace`).

    python -m audit run --datacenter dc1=zk:2181/dc1 --offline zk:2181/offline --state-dir var/audit
    python -m audit report --state-dir var/audit [--topic PageViewEvent] [--since 2026-11-23T10:00]
    python -m audit trace EVENT_ID --datacenter dc1=zk:2181/dc1 --offline zk:2181/offline --warehouse DIR \
        (--state-dir var/audit | --around 2026-11-23T10:00:12 [--topic PageViewEvent])

`run` counts what every cluster holds, collects the other tiers' AuditCounts, reconciles each window once its
grace passed and each tier is ready for it, and serves /metrics, /api/health and the results' JSON API on
--http-host:--http-port. SIGTERM checkpoints and exits 0; a reader that stops on an error stops the service (exit 1).
Errors are one line on stderr; exit codes: 0 success, 1 stopped on an error, 2 wrong settings.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from audit.commands import add_report_parser, add_trace_parser
from pipeline.config import Config
from pipeline.service import Service, add_settings_options, command_line, run_threaded, runner, settings_values

PROG = "python -m audit"

_OPTIONS = {"offline": "offline.zookeeper.connect", "state_dir": "state.dir", "http_port": "http.port",
            "http_host": "http.host",
            "registry": "schema.registry.url", "window_ms": "window.ms", "grace_ms": "grace.ms"}


def add_run_parser(subparsers: Any) -> None:
    """``run``: the audit service, until SIGTERM or SIGINT."""
    parser = subparsers.add_parser("run", help="run the audit service (the default command)")
    parser.add_argument("--datacenter", action="append", default=[], metavar="NAME=HOST:PORT[/CHROOT]",
                        help="a datacenter cluster by name and ZooKeeper (repeat for several)")
    parser.add_argument("--offline", metavar="HOST:PORT[/CHROOT]", help="the offline cluster's ZooKeeper")
    parser.add_argument("--state-dir", metavar="DIR", help="where counts, offsets and results are kept")
    parser.add_argument("--http-host", metavar="ADDRESS", help="address of /metrics and the JSON API (default 0.0.0.0)")
    parser.add_argument("--http-port", type=int, help="port of /metrics and the JSON API (default 8090)")
    parser.add_argument("--registry", metavar="URL", help="schema registry of the AuditCount schema")
    parser.add_argument("--window-ms", type=int, help="window of event time (default 60000)")
    parser.add_argument("--grace-ms", type=int, help="wait after a window's end before reconciling it")
    add_settings_options(parser)
    parser.set_defaults(command=run)


def load_config(args: argparse.Namespace) -> Config:
    from audit.config import AuditConfig

    values = settings_values(args, _OPTIONS)
    if args.datacenter:
        values["datacenters"] = ",".join(args.datacenter)
    return AuditConfig(values)


def audit(config: Config, stop: threading.Event) -> None:
    """Run the audit service until ``stop``, with its HTTP service (dashboard, JSON API and /metrics) when
    http.port is set."""
    from audit.http_api import AuditHttpServer
    from audit.service import AuditService

    service = AuditService(config)
    server = None
    try:
        if config["http.port"] is not None:
            server = AuditHttpServer(service, config["http.host"], config["http.port"]).start()
            shown = "127.0.0.1" if config["http.host"] in ("0.0.0.0", "") else config["http.host"]
            scheme = "https" if server.security.keystore else "http"
            print(f"{PROG}: serving {scheme}://{shown}:{server.port}/ (metrics at /metrics, authentication "
                  f"{server.security.method})", file=sys.stderr)
        service.run(stop)
    finally:
        if server is not None:
            server.stop()


def run(args: argparse.Namespace) -> int:
    from kazoo.exceptions import KazooException

    from audit.config import AUDIT_PROPERTIES
    from pipeline.client.errors import KafkaClientError
    from schemas.registry_client import SchemaRegistryError

    service = Service(PROG, AUDIT_PROPERTIES, load_config, (OSError, KazooException, KafkaClientError,
                                                            SchemaRegistryError))
    return run_threaded(service, args, audit)


def build_parser() -> argparse.ArgumentParser:
    return command_line(PROG, "The pipeline's audit: counts at every tier, reconciled per topic and window of event "
                              "time.", (add_run_parser, add_report_parser, add_trace_parser))


def main(argv: list[str] | None = None) -> int:
    return runner.main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
