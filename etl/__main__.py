"""`python -m etl`: the ETL's command line (etl.commands): `run` loads every new offset of the offline cluster
once, `schedule` runs it on a schedule, `history` shows what the runs did, `query` runs Spark SQL over the warehouse,
`quarantine` lists, shows and replays the records that could not be loaded (etl.quarantine_commands).

    python -m etl run --zookeeper zk:2181/offline --warehouse /data/warehouse [--topics REGEX] [--master URL]
    python -m etl schedule --every 5m --zookeeper zk:2181/offline --warehouse /data/warehouse [--metrics-port 9464]
    python -m etl history --warehouse /data/warehouse
    python -m etl query --warehouse /data/warehouse "SELECT kafka_topic, count(*) FROM events GROUP BY kafka_topic"
    python -m etl quarantine list|show|replay --warehouse /data/warehouse ...
    spark-submit etl/submit.py run --zookeeper zk:2181/offline --warehouse /data/warehouse
"""

from __future__ import annotations

import argparse
import sys

from etl.commands import add_history_parser, add_query_parser, add_run_parser, add_schedule_parser
from etl.quarantine_commands import add_quarantine_parser
from pipeline.service import log_to_stderr, write_owner_only

PROG = "python -m etl"


def build_parser() -> argparse.ArgumentParser:
    """The command line and its subcommands; each subcommand's parser sets ``handler`` (args -> exit code)."""
    parser = argparse.ArgumentParser(prog=PROG, description="Load the offline cluster into a Parquet warehouse "
                                                            "with Spark, every offset exactly once.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_run_parser(commands)
    add_schedule_parser(commands)
    add_history_parser(commands)
    add_query_parser(commands)
    add_quarantine_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Everything the ETL writes (warehouse, staging, history, Spark's output) is the owner's alone.
    write_owner_only()
    log_to_stderr()
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
