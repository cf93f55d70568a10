"""Compaction: the small files of a closed hour partition rewritten by Spark into files of about a target size.

Each run adds one file per range to the hours its events fall in, so an hour ends with one small file per run
that loaded it. Once the hour is closed (it ended ``compaction.delay`` ago) its files smaller than half the
target are rewritten into as few files as their bytes need: one Spark job per topic reads them (the files the
snapshot lists, never a directory listing), sends each hour to one task, sorts by partition and offset and
writes files of at most the rows that make ``compaction.target.bytes``. The result is checked (rows per hour
in = rows per hour out) and committed like a load (etl.commit): one manifest adds the new files and removes the
old ones, so readers of a snapshot see the hour before or after, never both or neither, and a compaction
killed anywhere is discarded or rolled forward. A late event lands in a new small file, compacted with the
hour's other small files at a later run.

    <topic>/date=D/hour=H/<topic>-compacted-<run>-<n>.parquet
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from etl.plan import EtlError
from etl.store import Move
from pipeline.durable_file import make_private_dir
from pipeline.warehouse_state import HourPartition, Snapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CompactionTask", "compact_topic", "compaction_plan"]

_HOUR_PATH = re.compile(r"date=([^/]+)/hour=([0-9]+)")


@dataclass(frozen=True)
class CompactionTask:
    """One hour partition's small files to rewrite, with their rows and bytes as the snapshot records them."""

    partition: HourPartition
    files: tuple[str, ...]
    rows: int
    bytes: int


def compaction_plan(snapshot: Snapshot, closed_before: float, target_bytes: int,
                    max_partitions: int) -> list[CompactionTask]:
    """The closed hour partitions (ended by ``closed_before``) of the tables whose small files (below half the
    target) are more than the files their bytes need, oldest first, at most ``max_partitions``."""
    tasks = []
    for partition, paths in sorted(snapshot.partitions().items(), key=lambda item: (item[0].date, item[0].hour,
                                                                                      item[0].topic)):
        if partition.quarantine or partition.ends_at() > closed_before:
            continue
        small = [p for p in paths if snapshot.files[p][1] < target_bytes / 2]
        size = sum(snapshot.files[p][1] for p in small)
        if len(small) >= 2 and len(small) > max(1, math.ceil(size / target_bytes)):
            tasks.append(CompactionTask(partition, tuple(small), sum(snapshot.files[p][0] for p in small), size))
            if len(tasks) == max_partitions:
                break
    return tasks


def compact_topic(spark: "SparkSession", warehouse: Path, topic: str, tasks: list[CompactionTask], staging: Path,
                  run_id: str, target_bytes: int) -> list[Move]:
    """Rewrite the files of ``tasks`` (all of ``topic``) into ``staging`` with Spark; the moves that publish the
    new files. EtlError when the rows written per hour are not the rows read."""
    rows, size = sum(t.rows for t in tasks), sum(t.bytes for t in tasks)
    per_file = max(1, int(target_bytes * rows / max(size, 1)))
    make_private_dir(staging.parent)
    frame = (spark.read.option("basePath", str(warehouse / topic)).option("mergeSchema", "true")
             .parquet(*(str(warehouse / path) for t in tasks for path in t.files)))
    (frame.repartition(len(tasks), "date", "hour")
     .sortWithinPartitions("date", "hour", "kafka_partition", "kafka_offset")
     .write.partitionBy("date", "hour").option("maxRecordsPerFile", per_file).mode("errorifexists")
     .parquet(str(staging)))
    expected = {(t.partition.date, t.partition.hour): t.rows for t in tasks}
    written: dict[tuple[str, int], int] = {}
    files_per_hour: dict[tuple[str, int], int] = {}
    moves = []
    for file in sorted(staging.rglob("*.parquet")):
        relative = file.parent.relative_to(staging)
        found = _HOUR_PATH.fullmatch(relative.as_posix())
        if found is None or file.name.startswith(("_", ".")):
            continue
        hour = (found.group(1), int(found.group(2)))
        count = pq.ParquetFile(file).metadata.num_rows
        written[hour] = written.get(hour, 0) + count
        number = files_per_hour[hour] = files_per_hour.get(hour, -1) + 1
        moves.append(Move(str(file.relative_to(warehouse)),
                          f"{topic}/{relative.as_posix()}/{topic}-compacted-{run_id}-{number}.parquet", -1, count,
                          file.stat().st_size))
    if written != {hour: rows for hour, rows in expected.items() if rows}:
        raise EtlError(f"compacting {topic}: wrote {sum(written.values())} rows for the {sum(expected.values())} "
                       f"read (per hour: {sorted(written.items())} for {sorted(expected.items())}); nothing published")
    return moves
