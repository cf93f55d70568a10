"""`python -m etl`: the ETL's command line (etl.commands): `run` loads every new offset of the offline cluster on a
schedule (also what a command line without a subcommand means), `load` loads them once, `history` shows what the
runs did, `query` runs Spark SQL over the warehouse, `quarantine` lists, shows and replays the records that could not
be loaded (etl.quarantine_commands).

    python -m etl run --every 5m --zookeeper zk:2181/offline --warehouse /data/warehouse [--metrics-port 9464]
    python -m etl load --zookeeper zk:2181/offline --warehouse /data/warehouse [--topics REGEX] [--master URL]
    python -m etl history --warehouse /data/warehouse
    python -m etl query --warehouse /data/warehouse "SELECT kafka_topic, count(*) FROM events GROUP BY kafka_topic"
    python -m etl quarantine list|show|replay --warehouse /data/warehouse ...
    spark-submit etl/submit.py load --zookeeper zk:2181/offline --warehouse /data/warehouse
"""

from __future__ import annotations

import argparse
import sys

from etl.commands import add_history_parser, add_load_parser, add_query_parser, add_run_parser
from etl.quarantine_commands import add_quarantine_parser
from pipeline.service import command_line, runner, write_owner_only

PROG = "python -m etl"


def build_parser() -> argparse.ArgumentParser:
    """The command line and its subcommands; each subcommand's parser sets ``command`` (args -> exit code)."""
    return command_line(PROG, "Load the offline cluster into a Parquet warehouse with Spark, every offset exactly "
                              "once.",
                        (add_run_parser, add_load_parser, add_history_parser, add_query_parser, add_quarantine_parser))


def main(argv: list[str] | None = None) -> int:
    # Everything the ETL writes (warehouse, staging, history, Spark's output) is the owner's alone.
    write_owner_only()
    return runner.main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
