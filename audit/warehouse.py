"""Finding an event's rows in the ETL's Parquet warehouse (WAREHOUSE/<topic>/date=YYYY-MM-DD/hour=H/*.parquet,
partitioned by event time), for ``python -m audit trace``: only the live files (those the warehouse's snapshot
lists, never a directory listing, which holds a compaction's replaced files for a while too) of the hours the event
time can lie in are read."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import NamedTuple

import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.warehouse_state import live_files

__all__ = ["WarehouseRow", "find_rows"]

_HOUR_MS = 3_600_000


class WarehouseRow(NamedTuple):
    """One row of the warehouse: its file (relative to the warehouse), its index there, its lineage."""

    file: str
    row: int
    kafka_partition: int
    kafka_offset: int


def find_rows(warehouse: Path, topic: str, start_ms: int, end_ms: int, event_id: str) -> list[WarehouseRow]:
    """The rows of ``topic`` whose ``header.eventId`` is ``event_id``, among the hours [start_ms, end_ms) touches."""
    found = []
    live = live_files(warehouse).get(topic, [])
    hour = start_ms - start_ms % _HOUR_MS
    while hour < end_ms:
        moment = datetime.datetime.fromtimestamp(hour / 1000, datetime.timezone.utc)
        directory = warehouse / topic / f"date={moment.date().isoformat()}" / f"hour={moment.hour}"
        for path in sorted(p for p in live if p.parent == directory):
            table = pq.read_table(path, columns=["header", "kafka_partition", "kafka_offset"])
            matches = pc.equal(pc.struct_field(table["header"], "eventId"), event_id)
            for index in pc.indices_nonzero(matches).to_pylist():
                found.append(WarehouseRow(str(path.relative_to(warehouse)), index,
                                          table["kafka_partition"][index].as_py(), table["kafka_offset"][index].as_py()))
        hour += _HOUR_MS
    return found
