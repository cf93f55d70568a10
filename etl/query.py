"""Spark SQL over the warehouse (``python -m etl query``): every table is a temporary view named by its topic, and
``events`` is the union (by name) of every table's common columns (the lineage columns ``kafka_topic``,
``kafka_partition``, ``kafka_offset``, ..., ``header``, ``date``, ``hour``), so that one query can count or
follow events across topics.

A table is a directory ``WAREHOUSE/<topic>`` holding Parquet files (``date=D/hour=H/...``); the ETL's own
directories (``_etl`` and anything else starting with ``_`` or ``.``) are not tables. Tables are read with
their schemas merged, so that files written before a schema evolution lack nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["EVENTS_VIEW", "QueryError", "events_frame", "register_views", "run_query", "show_query", "tables"]

EVENTS_VIEW = "events"


class QueryError(RuntimeError):
    """The warehouse has no table, or the query could not run (the message is Spark's first line)."""


def tables(warehouse: Path) -> dict[str, Path]:
    """Each table of ``warehouse``, by topic, in name order: its directories that hold Parquet files."""
    if not warehouse.is_dir():
        return {}
    return {path.name: path for path in sorted(warehouse.iterdir())
            if path.is_dir() and not path.name.startswith(("_", ".")) and next(path.rglob("*.parquet"), None)}


def register_views(session: "SparkSession", warehouse: Path) -> list[str]:
    """Register every table of ``warehouse`` and ``events`` as temporary views; their names. QueryError when the
    warehouse has no table."""
    found = _check_tables(warehouse)
    frames = {topic: session.read.option("mergeSchema", "true").parquet(str(path)) for topic, path in found.items()}
    for topic, frame in frames.items():
        frame.createOrReplaceTempView(topic)
    events_frame(list(frames.values())).createOrReplaceTempView(EVENTS_VIEW)
    return [*frames, EVENTS_VIEW]


def events_frame(frames: list["DataFrame"]) -> "DataFrame":
    """The union by name of ``frames`` on the columns all of them have with the same type (the first's order)."""
    types = [{field.name: field.dataType.simpleString() for field in frame.schema.fields} for frame in frames]
    common = [name for name, kind in types[0].items() if all(other.get(name) == kind for other in types[1:])]
    union = frames[0].select(*common)
    for frame in frames[1:]:
        union = union.unionByName(frame.select(*common))
    return union


def run_query(warehouse: Path, sql: str, master: str, limit: int) -> None:
    """Print the result of ``sql`` over the warehouse's views as a table (at most ``limit`` rows, cells not cut), in
    a SparkSession of its own on ``master``; QueryError for an empty warehouse or a query Spark refuses or fails."""
    _check_tables(warehouse)
    from pyspark.logger import PySparkLogger

    from etl.spark import spark_session, stop_session

    # PySpark logs a failed query's Java stack trace to stderr on these loggers; the error is said in one line.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = spark_session(master)
    try:
        session.sparkContext.setLogLevel("ERROR")
        show_query(session, warehouse, sql, limit)
    finally:
        stop_session(session)


def show_query(session: "SparkSession", warehouse: Path, sql: str, limit: int) -> None:
    """Register the warehouse's views in ``session`` and print the result of ``sql`` (see ``run_query``)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    register_views(session, warehouse)
    try:
        session.sql(sql).show(limit, truncate=False)
    except PySparkException as exc:
        raise QueryError(_first_line(str(exc))) from None
    except Py4JJavaError as exc:
        raise QueryError(_first_line(str(exc.java_exception.toString()))) from None


def _check_tables(warehouse: Path) -> dict[str, Path]:
    found = tables(warehouse)
    if not found:
        raise QueryError(f"the warehouse {warehouse} has no table yet (the ETL loads them: python -m etl run)"
                         if warehouse.is_dir() else f"there is no warehouse at {warehouse}")
    return found


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "the query failed"
