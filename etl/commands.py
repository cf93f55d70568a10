"""The subcommands of `python -m etl`: `run` (the scheduler), `load` (one run), `history` and `query`.

    python -m etl run --every 5m --zookeeper zk:2181/offline --warehouse /data/warehouse [--metrics-port 9464]
    python -m etl load --zookeeper zk:2181/offline --warehouse /data/warehouse [--topics REGEX] [--master URL]
    python -m etl history --warehouse /data/warehouse [--group etl] [--limit 20] [--json]
    python -m etl query --warehouse /data/warehouse [--master URL] [--limit 100] "SELECT ... FROM events ..."

``add_run_parser`` / ``add_load_parser`` / ``add_history_parser`` / ``add_query_parser`` add them to the
subparsers of the command line; each sets ``command`` (a function of the parsed arguments returning the exit code)
as its default. Options on the command line override ``--set KEY=VALUE``, which override the properties file
(``--config``). Exit codes: 0 success (``run``: stopped by SIGTERM or SIGINT, the run in progress finished;
``load``: the run succeeded or found nothing new), 1 the run failed (recorded in the run history), the scheduler
could not go on, or the query failed, 2 wrong settings. ``run`` and ``load`` take the group's lock in ZooKeeper
for every run, so that runs of the same group never overlap, wherever they are started.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any, Iterable, TextIO

from etl.config import ETL_PROPERTIES, EtlConfig
from etl.lock import Job
from pipeline.config import ConfigError, command_line_values
from pipeline.etl_runs import RunHistory, RunReport
from pipeline.service import Service, add_settings_options as add_service_settings, run_threaded, settings_values

__all__ = ["LOAD_OPTIONS", "RUN_OPTIONS", "add_history_parser", "add_load_parser", "add_query_parser",
           "add_run_parser", "add_settings_options", "history_main", "history_table", "load_config", "load_main",
           "query_main", "run_config", "run_main", "run_under_lock"]

PROG = "python -m etl"

# Command-line options of `load` (and `run`, `quarantine replay`) and the setting each one sets.
LOAD_OPTIONS = {"zookeeper": "zookeeper.connect", "warehouse": "warehouse.dir", "topics": "topics",
                "master": "spark.master", "group": "group.id", "registry": "schema.registry.url"}
# Those of `run`, the scheduler.
RUN_OPTIONS = {**LOAD_OPTIONS, "every": "schedule.every", "metrics_host": "metrics.host",
               "metrics_port": "metrics.port"}


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """The options that make an EtlConfig (see ``load_config``)."""
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="the offline cluster's ZooKeeper")
    parser.add_argument("--warehouse", metavar="DIR", help="the warehouse directory")
    parser.add_argument("--topics", metavar="REGEX", help="topics to load (whole names; default all)")
    parser.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    parser.add_argument("--group", help="name of this ETL: its offsets, lock and history (default etl)")
    parser.add_argument("--registry", metavar="URL", help="schema registry URL")
    add_service_settings(parser, set_help="any setting of --help-config; spark.* settings go to Spark")


def load_config(args: argparse.Namespace, options: dict[str, str] = LOAD_OPTIONS) -> EtlConfig:
    """The EtlConfig of a command line made with ``add_settings_options``."""
    return EtlConfig(settings_values(args, options))


def add_load_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``load``: one run of the ETL under the group's lock, then exit."""
    parser = subparsers.add_parser("load", help="load every new offset once, then exit",
                                   description="Load every new offset of the offline cluster's topics into the "
                                               "Parquet warehouse, exactly once, and record the run in its history.")
    add_settings_options(parser)
    parser.set_defaults(command=load_main)
    return parser


def load_main(args: argparse.Namespace, *, job: Job | None = None) -> int:
    """One run of a parsed ``load`` command line; 0 done, 1 the run failed, 2 wrong settings."""
    return run_threaded(Service(PROG, ETL_PROPERTIES, load_config, ()), args,
                        lambda config, stop: _load(config, stop, job))


def _load(config: EtlConfig, stop: Any, job: Job | None) -> int:
    from etl.schedule import SparkJob, one_line

    spark_job = SparkJob() if job is None else None
    try:
        report, code = run_under_lock(config, job or spark_job, PROG, stop)
    finally:
        if spark_job is not None:
            spark_job.close()
    if report is None:
        return code or 0
    print(f"run {report.run_id} {report.outcome}: {len(report.ranges)} ranges, {report.rows} rows, "
          f"{report.bytes} bytes in {report.duration_s:.1f}s"
          + (f", {sum(s.count for s in report.skipped)} offsets skipped" if report.skipped else "")
          + (f", {report.quarantined_records} records quarantined (python -m etl quarantine list)"
             if report.quarantined else ""))
    if report.maintenance_error:
        print(f"{PROG}: warning: keeping the warehouse failed: {report.maintenance_error}", file=sys.stderr)
    for topic, error in sorted(report.topic_errors.items()):
        print(f"{PROG}: error: topic {topic} not loaded: {one_line(error)}", file=sys.stderr)
    return 1 if report.topic_errors else 0


def run_under_lock(config: EtlConfig, job: Any, prog: str, stop: Any = None) -> tuple[Any, int | None]:
    """``job(config, still_locked=...)`` under the group's lock (etl.lock.run_locked), stopped by ``stop`` (None:
    SIGTERM or SIGINT) while waiting: (its result, None), or (None, the exit code) after a one-line error (1) or a
    stop (0)."""
    from kazoo.exceptions import KazooException

    from etl.lock import run_locked
    from etl.plan import EtlError
    from pipeline.service import stop_on_signals

    try:
        result = run_locked(config, job, stop if stop is not None else stop_on_signals())
    except EtlError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return None, 1
    except (KazooException, OSError) as error:
        print(f"{prog}: error: {str(error) or type(error).__name__}", file=sys.stderr)
        return None, 1
    if result is None:
        print(f"{prog}: stopped while waiting for the lock of ETL group {config['group.id']}", file=sys.stderr)
        return None, 0
    return result, None


def add_run_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``run``: the scheduler, running the ETL every ``--every`` under the ZooKeeper lock until SIGTERM or SIGINT."""
    parser = subparsers.add_parser(
        "run", help="run the ETL on a schedule, never two runs at once (the default command)", description=(
            "Run the ETL every --every (the next run starts that long after the previous one started, or right "
            "after it when it took longer), under a lock in ZooKeeper that keeps the runs of several schedulers "
            "apart. A failed run is logged and the schedule goes on. SIGTERM or SIGINT: the run in progress "
            "finishes, then exit 0."))
    add_settings_options(parser)
    parser.add_argument("--every", metavar="DURATION", help="time between the runs' starts: 30s, 5m, 1h (default 5m)")
    parser.add_argument("--metrics-host", metavar="ADDRESS",
                        help="address the metrics server listens on (default 0.0.0.0)")
    parser.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on this port")
    parser.set_defaults(command=run_main)
    return parser


def run_config(args: argparse.Namespace) -> EtlConfig:
    """The settings of a parsed ``run`` command line (the file, then --set, then the options)."""
    return load_config(args, RUN_OPTIONS)


def run_main(args: argparse.Namespace, *, job: Job | None = None) -> int:
    """Run the scheduler of a parsed ``run`` command line until SIGTERM or SIGINT; ``job`` replaces the Spark load
    (tests)."""
    from kazoo.exceptions import KazooException

    from etl.schedule import Scheduler

    # ZooKeeper unreachable, the metrics port taken, ...: exit 1.
    service = Service(PROG, ETL_PROPERTIES, run_config, (KazooException, OSError))
    return run_threaded(service, args, lambda config, stop: Scheduler(config, job, stop).run())


def add_history_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``history``: the recorded runs of one ETL group, newest first."""
    parser = subparsers.add_parser(
        "history", help="what the recent runs did", description=(
            "The recorded runs of one ETL group, newest first: when each started, its outcome, ranges, rows, "
            "bytes, duration, offsets skipped and error."))
    parser.add_argument("--config", metavar="FILE", help="properties file to read warehouse.dir and group.id from")
    parser.add_argument("--warehouse", metavar="DIR", help="the warehouse directory")
    parser.add_argument("--group", help="the ETL group (default etl)")
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="show at most N runs (default 20)")
    parser.add_argument("--json", action="store_true", help="a JSON array of the runs instead of a table")
    parser.set_defaults(command=history_main)
    return parser


def history_main(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Print the runs a parsed ``history`` command line asks for."""
    out = out or sys.stdout
    defaults = {p.name: p.default for p in ETL_PROPERTIES}
    try:
        values = command_line_values(args.config, [], {"warehouse.dir": args.warehouse, "group.id": args.group})
    except (ConfigError, OSError) as error:
        print(f"{PROG} history: error: {error}", file=sys.stderr)
        return 2
    warehouse, group = values.get("warehouse.dir"), values.get("group.id", defaults["group.id"])
    if not warehouse:
        print(f"{PROG} history: error: give the warehouse directory (--warehouse DIR)", file=sys.stderr)
        return 2
    if args.limit < 1:
        print(f"{PROG} history: error: --limit must be at least 1", file=sys.stderr)
        return 2
    runs = RunHistory(warehouse, group).runs(args.limit)
    if args.json:
        json.dump([_json_run(run) for run in runs], out, indent=1, sort_keys=True)
        out.write("\n")
    elif runs:
        out.write(history_table(runs) + "\n")
    else:
        print(f"no runs recorded for ETL group {group} under {warehouse}", file=sys.stderr)
    return 0


def add_query_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``query``: Spark SQL over the warehouse, the result printed as a table."""
    parser = subparsers.add_parser(
        "query", help="Spark SQL over the warehouse", description=(
            "Run a Spark SQL query over the warehouse and print the result as a table. Every table is a view named "
            "by its topic (e.g. PageViewEvent), and `events` is the union of every table's common columns "
            "(kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, source_cluster, source_partition, "
            "source_offset, header, date, hour)."))
    parser.add_argument("--warehouse", metavar="DIR", required=True, help="the warehouse directory")
    parser.add_argument("--master", metavar="URL", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--limit", type=int, default=100, metavar="N", help="show at most N rows (default 100)")
    parser.add_argument("sql", metavar="SQL", help='the query, e.g. "SELECT kafka_topic, count(*) FROM events '
                                                   'GROUP BY kafka_topic"')
    parser.set_defaults(command=query_main)
    return parser


def query_main(args: argparse.Namespace) -> int:
    """Run a parsed ``query`` command line: 0 the result was printed, 1 the query failed or there is no table, 2 a
    wrong option."""
    from pathlib import Path

    from etl.query import QueryError, run_query

    if args.limit < 1:
        print(f"{PROG} query: error: --limit must be at least 1", file=sys.stderr)
        return 2
    try:
        run_query(Path(args.warehouse), args.sql, args.master, args.limit)
    except QueryError as error:
        print(f"{PROG} query: error: {error}", file=sys.stderr)
        return 1
    return 0


def _json_run(run: RunReport) -> dict[str, Any]:
    return {**asdict(run), "rows": run.rows, "bytes": run.bytes, "duration_s": run.duration_s,
            "quarantined_records": run.quarantined_records}


_COLUMNS = ("started", "run id", "outcome", "ranges", "rows", "bytes", "duration", "skipped", "quarantined",
            "error")


def history_table(runs: Iterable[RunReport]) -> str:
    """Runs as an aligned text table, one line each (an error's first line only)."""
    from etl.schedule import one_line

    rows = [(time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(run.started_at)), run.run_id, run.outcome or "running",
             str(len(run.ranges)), str(run.rows), _size(run.bytes),
             "" if run.duration_s is None else f"{run.duration_s:.1f}s",
             str(sum(s.count for s in run.skipped)), str(run.quarantined_records), one_line(run.error or ""))
            for run in runs]
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(_COLUMNS)]
    numeric = {3, 4, 5, 6, 7, 8}
    return "\n".join("  ".join(cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                               for i, cell in enumerate(row)).rstrip()
                     for row in [_COLUMNS, *rows])


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    size, unit = count / 1024, "KB"
    for larger in ("MB", "GB", "TB"):
        if size < 1024:
            break
        size, unit = size / 1024, larger
    return f"{size:.1f} {unit}"
