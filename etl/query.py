"""Spark SQL over the warehouse (``python -m etl query``): every table is a temporary view named by its topic, and
``events`` is the union (by name) of every table's common columns (the lineage columns ``kafka_topic``,
``kafka_partition``, ``kafka_offset``, ..., ``header``, ``date``, ``hour``), so that one query can count or
follow events across topics.

A table is a directory ``WAREHOUSE/<topic>`` of Parquet files (``date=D/hour=H/...``), and a query reads the
files the warehouse's snapshot lists (pipeline.warehouse_state; every ETL group's of the warehouse), never a directory
listing: a compaction or a replay committed while a query runs is seen whole or not at all, and the files it
replaced stay until the query is long done. The quarantined records are the view ``quarantine`` (their lineage,
reason, error, key, value and headers; etl.quarantine). Tables are read with their schemas merged, so that files
written before a schema evolution lack nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from pipeline.warehouse_state import QUARANTINE_DIR, live_files

__all__ = ["EVENTS_VIEW", "QUARANTINE_VIEW", "QueryError", "events_frame", "register_views", "run_query", "show_query"]

EVENTS_VIEW = "events"
QUARANTINE_VIEW = "quarantine"


class QueryError(RuntimeError):
    """The warehouse has no table, or the query could not run (the message is Spark's first line)."""


def register_views(session: "SparkSession", warehouse: Path) -> list[str]:
    """Register every table of ``warehouse``, ``events`` and ``quarantine`` (when a record is quarantined) as
    temporary views; their names. QueryError when the warehouse has no table."""
    found = _check_tables(warehouse)
    quarantined = found.pop(QUARANTINE_DIR, [])
    frames = {topic: session.read.option("basePath", str(warehouse / topic)).option("mergeSchema", "true")
              .parquet(*map(str, files)) for topic, files in found.items()}
    for topic, frame in frames.items():
        frame.createOrReplaceTempView(topic)
    events_frame(list(frames.values())).createOrReplaceTempView(EVENTS_VIEW)
    names = [*frames, EVENTS_VIEW]
    if quarantined and QUARANTINE_VIEW not in frames:
        by_topic: dict[str, list[str]] = {}
        for path in quarantined:
            by_topic.setdefault(path.relative_to(warehouse / QUARANTINE_DIR).parts[0], []).append(str(path))
        parts = [session.read.option("basePath", str(warehouse / QUARANTINE_DIR / topic)).parquet(*paths)
                 for topic, paths in sorted(by_topic.items())]
        union = parts[0]
        for part in parts[1:]:
            union = union.unionByName(part, allowMissingColumns=True)
        union.createOrReplaceTempView(QUARANTINE_VIEW)
        names.append(QUARANTINE_VIEW)
    return names


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


def _check_tables(warehouse: Path) -> dict[str, list[Path]]:
    found = live_files(warehouse)
    if not [topic for topic in found if topic != QUARANTINE_DIR]:
        raise QueryError(f"the warehouse {warehouse} has no table yet (the ETL loads them: python -m etl run)"
                         if warehouse.is_dir() else f"there is no warehouse at {warehouse}")
    return found


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "the query failed"
