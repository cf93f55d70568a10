"""`python -m audit`: the audit service (`run`) and its reconciliation table (`report`).

    python -m audit run --datacenter dc1=zk:2181/dc1 --offline zk:2181/offline --state-dir var/audit
    python -m audit report --state-dir var/audit [--topic PageViewEvent] [--since 2026-11-23T10:00]

`run` counts what every cluster holds, collects the other tiers' AuditCounts, reconciles each window once its
grace passed, and serves /metrics and the results' JSON API on --http-port. SIGTERM checkpoints and exits 0.
Errors are one line on stderr; exit codes: 0 success, 1 stopped on an error, 2 wrong settings.
"""

from __future__ import annotations

import argparse
import datetime
import sys

from pipeline.config import ConfigError, command_line_values, help_table
from pipeline.service import log_to_stderr, stop_on_signals

PROG = "python -m audit"

_OPTIONS = {"offline": "offline.zookeeper.connect", "state_dir": "state.dir", "http_port": "http.port",
            "registry": "schema.registry.url", "window_ms": "window.ms", "grace_ms": "grace.ms"}


def _run_parser(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="run the audit service")
    run.add_argument("--config", metavar="FILE", help="properties file (see --help-config)")
    run.add_argument("--datacenter", action="append", default=[], metavar="NAME=HOST:PORT[/CHROOT]",
                     help="a datacenter cluster by name and ZooKeeper (repeat for several)")
    run.add_argument("--offline", metavar="HOST:PORT[/CHROOT]", help="the offline cluster's ZooKeeper")
    run.add_argument("--state-dir", metavar="DIR", help="where counts, offsets and results are kept")
    run.add_argument("--http-port", type=int, help="port of /metrics and the JSON API (default 8090)")
    run.add_argument("--registry", metavar="URL", help="schema registry of the AuditCount schema")
    run.add_argument("--window-ms", type=int, help="window of event time (default 60000)")
    run.add_argument("--grace-ms", type=int, help="wait after a window's end before reconciling it")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any setting of --help-config")
    run.add_argument("--help-config", action="store_true", help="list every setting and exit")


def _report_parser(subparsers: argparse._SubParsersAction) -> None:
    report = subparsers.add_parser("report", help="print the reconciliation table")
    report.add_argument("--state-dir", required=True, metavar="DIR")
    report.add_argument("--topic")
    report.add_argument("--since", metavar="ISO-TIME", help="windows starting at or after this time (UTC)")


def run(args: argparse.Namespace) -> int:
    from audit.config import AUDIT_PROPERTIES, AuditConfig

    if args.help_config:
        print(help_table(AUDIT_PROPERTIES))
        return 0
    try:
        values = command_line_values(args.config, args.set, {name: getattr(args, option)
                                                             for option, name in _OPTIONS.items()})
        if args.datacenter:
            values["datacenters"] = ",".join(args.datacenter)
        config = AuditConfig(values)
    except (ConfigError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    from kazoo.exceptions import KazooException

    from audit.http_api import AuditHttpServer
    from audit.service import AuditService
    from pipeline.client.errors import KafkaClientError
    from schemas.registry_client import SchemaRegistryError

    stop = stop_on_signals()
    service = AuditService(config)
    server = None
    try:
        if config["http.port"] is not None:
            server = AuditHttpServer(service, "0.0.0.0", config["http.port"]).start()
            print(f"{PROG}: serving http://127.0.0.1:{server.port}/ (metrics at /metrics)", file=sys.stderr)
        service.run(stop)
    except (OSError, KazooException, KafkaClientError, SchemaRegistryError) as error:
        print(f"{PROG}: error: {str(error) or type(error).__name__}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop()
    return 0


def report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from audit.reconcile import TIERS
    from audit.results import ResultLog

    since = None
    if args.since:
        try:
            moment = datetime.datetime.fromisoformat(args.since)
        except ValueError:
            print(f"{PROG} report: error: --since {args.since!r} is not an ISO time", file=sys.stderr)
            return 2
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        since = int(moment.timestamp() * 1000)
    results = ResultLog(Path(args.state_dir) / "results.jsonl").read(since)
    rows = [d for k, d in sorted(results.items()) if args.topic is None or k.topic == args.topic]
    header = ["window (UTC)", "topic", "dc", *TIERS, "named"]
    table = [header]
    for d in rows:
        start = datetime.datetime.fromtimestamp(d["windowStart"] / 1000, datetime.timezone.utc)
        cells = []
        for tier in TIERS:
            count = d["counts"].get(tier)
            ratio = d["completeness"].get(tier)
            cells.append("-" if count is None else f"{count}" + ("" if ratio is None else f" ({ratio:.3f})"))
        named = "; ".join(
            f"{x['later']}: {len(x['missing'])} missing, {len(x['duplicated'])} duplicated"
            + ("" if x["decoded"] else " (too many to name)") for x in d["discrepancies"])
        table.append([start.strftime("%Y-%m-%d %H:%M:%S"), d["topic"], d["datacenter"], *cells, named or "-"])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="The pipeline's audit: counts at every tier, "
                                                            "reconciled per topic and window of event time.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _run_parser(subparsers)
    _report_parser(subparsers)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    log_to_stderr()
    return run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
