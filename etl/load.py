"""The Spark side of loading one topic: one task per range, Parquet written into the run's staging directory.

The ranges become a DataFrame of one row per partition (``spark.range`` with one partition per range, made in
the JVM, no shuffle after it), so task (and Spark output file) ``part-NNNNN`` is range NNNNN; ``mapInArrow`` runs
:func:`etl.task.load_ranges` on each, and the rows are written partitioned by date and hour. Afterwards
``staged_moves`` names every staged file's published place, deterministic per range:
``<topic>/date=D/hour=H/<topic>-<partition>-<start>-<end>-<n>.parquet``, and ``staged_quarantine_moves`` those of
the records the tasks quarantined: ``_quarantine/<topic>/date=D/hour=H/<topic>-<partition>-<start>-<end>.parquet``.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema

from etl.avro_types import spark_schema
from etl.plan import OffsetRange
from etl.store import Move
from etl.task import LINEAGE_FIELDS, PARTITION_COLUMNS, TaskContext, load_ranges
from pipeline.durable_file import make_private_dir
from pipeline.warehouse_state import QUARANTINE_DIR

__all__ = ["ColumnClash", "load_topic", "staged_moves", "staged_quarantine_moves", "table_schema"]

_PART_FILE = re.compile(r"part-([0-9]+)-.*?\.c([0-9]+)(?:\.[a-z0-9]+)?\.parquet")
_QUARANTINE_FILE = re.compile(r"part-([0-9]+)\.parquet")


class ColumnClash(ValueError):
    """An event field has the name of a column the ETL adds."""


def table_schema(reader_schema: dict[str, Any]) -> T.StructType:
    """The Spark schema of a topic's table: the event's fields, the lineage columns, date and hour."""
    event = spark_schema(reader_schema)
    added = (*LINEAGE_FIELDS, *PARTITION_COLUMNS)
    clash = sorted(set(event.fieldNames()) & {name for name, _ in added})
    if clash:
        raise ColumnClash(f"the events of {reader_schema.get('name')} have fields named like the ETL's columns: "
                          f"{', '.join(clash)}")
    extra = [T.StructField(name, from_arrow_type(arrow), True) for name, arrow in added]
    return T.StructType([*event.fields, *extra])


def load_topic(spark: SparkSession, context: TaskContext, ranges: list[OffsetRange], first_index: int,
               staging: Path, window_ms: int, accumulator: Any) -> None:
    """Load ``ranges`` (all of ``context.topic``, the run's ranges from ``first_index`` on) into Parquet under
    ``staging`` (which must not exist); each task reports its stats under its range's index in the run."""
    make_private_dir(staging.parent)
    schema = table_schema(json.loads(context.reader_schema))
    target = to_arrow_schema(schema, timezone="UTC")
    loaded = range_frame(spark, ranges, first_index).mapInArrow(functools.partial(load_ranges, context, window_ms, accumulator, target), schema)
    loaded.write.partitionBy("date", "hour").mode("errorifexists").parquet(str(staging))


def range_frame(spark: SparkSession, ranges: list[OffsetRange], first_index: int) -> DataFrame:
    """One row per range -- (index in the run, partition, start, end) -- in a partition of its own, partition i
    holding range i; made in the JVM (``spark.range`` over literal arrays), so no Python worker serves it."""
    number = F.col("id").cast("int")
    rows = spark.range(0, len(ranges), 1, len(ranges))

    def pick(values: list[int], kind: str) -> Column:
        return F.element_at(F.array(*(F.lit(v).cast(kind) for v in values)), number + 1)

    return rows.select((number + first_index).alias("index"), pick([r.partition for r in ranges], "int").alias(
        "partition"), pick([r.start for r in ranges], "long").alias("start"),
        pick([r.end for r in ranges], "long").alias("end"))


def staged_moves(warehouse: Path, staging: Path, topic: str, ranges: list[OffsetRange],
                 range_offset: int) -> list[Move]:
    """Every Parquet file Spark staged for ``topic`` and its published place; ``range_offset`` is the index of
    the topic's first range in the run's list of ranges."""
    moves = []
    if not staging.is_dir():
        return moves
    for file in sorted(staging.rglob("*.parquet")):
        match = _PART_FILE.fullmatch(file.name)
        if match is None or any(part.startswith(("_", ".")) for part in file.relative_to(staging).parts):
            continue
        index = int(match.group(1))
        r = ranges[index]
        directory = file.parent.relative_to(staging)
        published = Path(topic) / directory / f"{topic}-{r.partition}-{r.start}-{r.end}-{int(match.group(2))}.parquet"
        moves.append(Move(str(file.relative_to(warehouse)), str(published), range_offset + index,
                          pq.ParquetFile(file).metadata.num_rows, file.stat().st_size))
    return moves


def staged_quarantine_moves(warehouse: Path, staging: Path, topic: str, ranges: list[OffsetRange],
                            range_offset: int) -> list[Move]:
    """Every quarantine file the tasks of ``topic`` staged (``part-NNNNN.parquet``, NNNNN the range's index in the
    run) and its published place."""
    moves = []
    if not staging.is_dir():
        return moves
    for file in sorted(staging.rglob("part-*.parquet")):
        match = _QUARANTINE_FILE.fullmatch(file.name)
        if match is None:
            continue
        index = int(match.group(1))
        r = ranges[index - range_offset]
        directory = file.parent.relative_to(staging)
        published = Path(QUARANTINE_DIR) / topic / directory / f"{topic}-{r.partition}-{r.start}-{r.end}.parquet"
        moves.append(Move(str(file.relative_to(warehouse)), str(published), index,
                          pq.ParquetFile(file).metadata.num_rows, file.stat().st_size))
    return moves
