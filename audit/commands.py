"""`python -m audit report` and `python -m audit trace`: what the audit's stored results say, and where one event
is held at every tier."""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from pipeline.security.command_config import add_command_config_option

PROG = "python -m audit"


def add_report_parser(subparsers: Any) -> None:
    """``report``: the stored results as a table."""
    parser = subparsers.add_parser("report", help="print the reconciliation table")
    parser.add_argument("--state-dir", required=True, metavar="DIR")
    parser.add_argument("--topic")
    parser.add_argument("--since", metavar="ISO-TIME", help="windows starting at or after this time (UTC)")
    parser.set_defaults(command=report)


def add_trace_parser(subparsers: Any) -> None:
    """``trace``: one event at every tier."""
    parser = subparsers.add_parser("trace", help="find one event at every tier")
    parser.add_argument("event_id", metavar="EVENT_ID")
    parser.add_argument("--datacenter", action="append", default=[], metavar="NAME=HOST:PORT[/CHROOT]")
    parser.add_argument("--offline", metavar="HOST:PORT[/CHROOT]")
    parser.add_argument("--warehouse", metavar="DIR", help="the ETL's warehouse, to find the event's rows")
    parser.add_argument("--state-dir", metavar="DIR", help="find the event's window among the named events there")
    parser.add_argument("--around", metavar="ISO-TIME", help="the event's time, give or take a window (UTC)")
    parser.add_argument("--topic", help="its topic (default: every event topic)")
    parser.add_argument("--window-ms", type=int, default=60_000)
    add_command_config_option(parser)
    parser.set_defaults(command=trace)


def _millis(text: str) -> int:
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def trace(args: argparse.Namespace) -> int:
    """Where the event is held: each cluster's topic, partition and offset (several lines: duplicates)."""
    from pathlib import Path

    from audit.results import ResultLog
    from audit.window_scan import scan_window
    from pipeline.client.cluster import Cluster
    from pipeline.client.errors import KafkaClientError
    from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
    from pipeline.named_clusters import parse_sources
    from pipeline.protocol.errors import KafkaProtocolError
    from pipeline.security.command_config import read_command_config
    from schemas.events import EVENT_TOPICS

    try:
        clusters = dict(parse_sources(",".join(args.datacenter))) if args.datacenter else {}
        if args.offline:
            clusters["offline"] = args.offline
        if not clusters and not args.warehouse:
            raise ValueError("give where to look: --datacenter NAME=ZOOKEEPER, --offline ZOOKEEPER, --warehouse DIR")
        windows: list[tuple[str, int, int]] = []
        if args.state_dir:
            for key, data in ResultLog(Path(args.state_dir) / "results.jsonl").read().items():
                if args.event_id in named_ids(data):
                    windows.append((key.topic, key.window_start, key.window_end))
        if not windows and args.around:
            moment = _millis(args.around)
            topics = [args.topic] if args.topic else sorted(EVENT_TOPICS)
            windows = [(t, moment - args.window_ms, moment + args.window_ms) for t in topics]
        if not windows:
            raise ValueError("the event is not among the named events; give --around TIME (and --topic)")
    except ValueError as error:
        print(f"{PROG} trace: error: {error}", file=sys.stderr)
        return 2
    try:
        security = read_command_config(args.command_config).client
    except ValueError as error:
        print(f"{PROG} trace: error: {error}", file=sys.stderr)
        return 2
    found = 0
    for name, connect in clusters.items():
        discovery = ZooKeeperBrokerDiscovery(connect)
        cluster = Cluster(discovery, client_id="audit-trace", security=security)
        try:
            for topic, start, end in windows:
                for event in scan_window(cluster, topic, start, end):
                    if event.event_id == args.event_id:
                        found += 1
                        when = datetime.datetime.fromtimestamp(event.event_time / 1000, datetime.timezone.utc)
                        print(f"{name}: {event.topic}-{event.partition}@{event.offset} (datacenter "
                              f"{event.datacenter}, event time {when.isoformat()})")
        except (KafkaClientError, KafkaProtocolError, OSError) as error:
            print(f"{PROG} trace: error: {name}: {error}", file=sys.stderr)
            return 1
        finally:
            cluster.close()
            discovery.close()
    if args.warehouse:
        from audit.warehouse import find_rows

        for topic, start, end in windows:
            for row in find_rows(Path(args.warehouse), topic, start, end, args.event_id):
                found += 1
                print(f"warehouse: {row.file} row {row.row} (offline {topic}-{row.kafka_partition}@"
                      f"{row.kafka_offset})")
    if not found:
        places = [*clusters, *(["warehouse"] if args.warehouse else [])]
        print(f"{PROG} trace: {args.event_id} is in none of {', '.join(places)} around that time", file=sys.stderr)
        return 1
    return 0


def named_ids(data: dict) -> set[str]:
    """Every event id a stored result names (lost, duplicated, unexpected, quarantined, or in a step between tiers)."""
    ids: set[str] = set()
    for d in data["discrepancies"]:
        ids.update(d["missing"], d["duplicated"], d.get("unexpected") or {})
    for named in (data.get("lost") or {}, data.get("duplicated") or {}, data.get("unexpected") or {}):
        for events in named.values():
            ids.update(events)
    for q in data.get("quarantined") or []:
        ids.update(q.get("ids") or {})
    return ids


def describe_named(data: dict) -> str:
    """What a stored result names, per tier: ``lost 3 at mirror; unexpected 1 at datacenter; quarantined 1 at
    warehouse (null value); ...``."""
    parts = []
    lost = {tier: sum(ids.values()) for tier, ids in (data.get("lost") or {}).items()}
    for tier, n in (data.get("lostByCount") or {}).items():
        lost[tier] = lost.get(tier, 0) + n
    parts += [f"lost {n} at {tier}" for tier, n in lost.items() if n]
    parts += [f"duplicated {sum(ids.values())} at {tier}" for tier, ids in (data.get("duplicated") or {}).items()]
    parts += [f"unexpected {sum(ids.values())} at {tier} (created by no audited producer)"
              for tier, ids in (data.get("unexpected") or {}).items()]
    parts += [f"quarantined {q['count'] + q['withoutId']} at {q['tier']} ({q['reason']})"
              for q in data.get("quarantined") or []]
    parts += [f"{d['earlier']}->{d['later']} too many to name" for d in data["discrepancies"] if not d["decoded"]]
    identity = data.get("identity")
    if identity and not identity["holds"]:
        parts.append(f"unaccounted: created {identity['created']} != {identity['held']} held at {identity['tier']} "
                     f"- {identity['duplicates']} duplicates - {identity.get('unexpected', 0)} unexpected + "
                     f"{identity['lost']} lost + {identity['quarantined']} quarantined")
    return "; ".join(parts)


def report(args: argparse.Namespace) -> int:
    """The stored results as a table: per window its state, each tier's count and completeness (or ``pending``,
    with what it waited for when reconciled) and what is named."""
    from pathlib import Path

    from audit.reconcile import TIERS
    from audit.results import ResultLog

    since = None
    if args.since:
        try:
            since = _millis(args.since)
        except ValueError:
            print(f"{PROG} report: error: --since {args.since!r} is not an ISO time", file=sys.stderr)
            return 2
    results = ResultLog(Path(args.state_dir) / "results.jsonl").read(since)
    rows = [d for k, d in sorted(results.items()) if args.topic is None or k.topic == args.topic]
    header = ["window (UTC)", "topic", "dc", "state", *TIERS, "named"]
    table = [header]
    for d in rows:
        start = datetime.datetime.fromtimestamp(d["windowStart"] / 1000, datetime.timezone.utc)
        pending = d.get("pending") or {}
        cells = []
        for tier in TIERS:
            count = d["counts"].get(tier)
            ratio = d["completeness"].get(tier)
            if count is None:
                cells.append("-")
            elif tier in pending:
                lag = pending[tier].get("lagRecords")
                cells.append(f"{count} pending" + ("" if lag is None else f" (lag {lag})"))
            else:
                cells.append(f"{count}" + ("" if ratio is None else f" ({ratio:.3f})"))
        state = d.get("state") or ("incomplete" if d["discrepancies"] else "complete")
        table.append([start.strftime("%Y-%m-%d %H:%M:%S"), d["topic"], d["datacenter"], state, *cells,
                      describe_named(d) or "-"])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0
