"""`python -m etl`: the ETL's command line; `run` loads every new offset of the offline cluster once.

    python -m etl run --zookeeper zk:2181/offline --warehouse /data/warehouse [--topics REGEX] [--master URL]
    spark-submit etl/submit.py run --zookeeper zk:2181/offline --warehouse /data/warehouse

Options on the command line override ``--set KEY=VALUE``, which override the properties file (``--config``);
``--help-config`` lists every setting. Errors are one line on stderr; exit codes: 0 the run succeeded (or found
nothing new), 1 the run failed (recorded in the run history), 2 wrong settings.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pipeline.config import ConfigError, command_line_values, help_table
from pipeline.service import log_to_stderr

if TYPE_CHECKING:
    from etl.config import EtlConfig

PROG = "python -m etl"

# Command-line options of `run` and the setting each one sets.
RUN_OPTIONS = {"zookeeper": "zookeeper.connect", "warehouse": "warehouse.dir", "topics": "topics",
               "master": "spark.master", "group": "group.id", "registry": "schema.registry.url"}


def add_run_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The `run` subcommand's parser (its settings options are shared with the scheduler's)."""
    parser = commands.add_parser("run", help="load every new offset once, then exit",
                                 description="Load every new offset of the offline cluster's topics into the "
                                             "Parquet warehouse, exactly once, and record the run in its history.")
    add_settings_options(parser)
    parser.set_defaults(handler=run)
    return parser


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """The options that make an EtlConfig (see ``load_config``)."""
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="the offline cluster's ZooKeeper")
    parser.add_argument("--warehouse", metavar="DIR", help="the warehouse directory")
    parser.add_argument("--topics", metavar="REGEX", help="topics to load (whole names; default all)")
    parser.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    parser.add_argument("--group", help="name of this ETL (default etl)")
    parser.add_argument("--registry", metavar="URL", help="schema registry URL")
    parser.add_argument("--config", metavar="FILE", help="properties file (see --help-config)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any setting of --help-config; spark.* settings go to Spark")
    parser.add_argument("--help-config", action="store_true", help="list every setting and exit")


def build_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The command line and its subcommands; each subcommand's parser sets ``handler`` (args -> exit code)."""
    parser = argparse.ArgumentParser(prog=PROG, description="Load the offline cluster into a Parquet warehouse "
                                                            "with Spark, every offset exactly once.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_run_parser(commands)
    return parser, commands


def load_config(args: argparse.Namespace) -> "EtlConfig":
    """The EtlConfig of a command line made with ``add_settings_options``."""
    from etl.config import EtlConfig

    return EtlConfig(command_line_values(args.config, args.set,
                                         {name: getattr(args, option) for option, name in RUN_OPTIONS.items()}))


def run(args: argparse.Namespace) -> int:
    """`run`: one run of the ETL; 0 done, 1 the run failed, 2 wrong settings."""
    try:
        config = load_config(args)
    except (ConfigError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    from etl.job import EtlError, run_once

    try:
        report = run_once(config)
    except EtlError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    print(f"run {report.run_id} {report.outcome}: {len(report.ranges)} ranges, {report.rows} rows, "
          f"{report.bytes} bytes in {report.duration_s:.1f}s"
          + (f", {sum(s.count for s in report.skipped)} offsets skipped" if report.skipped else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    log_to_stderr()
    parser, _ = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "help_config", False):
        from etl.config import ETL_PROPERTIES
        print(help_table(ETL_PROPERTIES))
        return 0
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
