"""The quarantine table: records a task could not turn into a row, set aside with their lineage, raw bytes and error.

    WAREHOUSE/_quarantine/<topic>/date=YYYY-MM-DD/hour=H/<topic>-<partition>-<start>-<end>.parquet

One file per range and hour, staged by the task that read the range (:class:`QuarantineWriter`) beside the rows
it loaded and published by the same manifest, so that a record is in its table or in the quarantine exactly
once. The hour is the event's (``header.eventTime`` read with :func:`schemas.serde.event_key`, which needs no
registry) or, for a record without one, its Kafka timestamp's. Columns: :data:`QUARANTINE_SCHEMA`.

Reasons are short, stable categories (docs/accounting.md): the audit names quarantined events by them and the
``etl_records_quarantined_total`` metric is labelled with them.
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from etl.files import FILE_MODE
from pipeline.durable_file import make_private_dir
from schemas.serde import event_key

__all__ = ["BadRecord", "NOT_WIRE_FORMAT", "NULL_VALUE", "QUARANTINE_SCHEMA", "QuarantineWriter", "Quarantined",
           "REASONS", "UNCONVERTIBLE", "UNDECODABLE", "UNKNOWN_SCHEMA_ID", "event_id_of", "quarantine_table",
           "quarantined_row"]

NULL_VALUE = "null value"
NOT_WIRE_FORMAT = "not in the Confluent wire format"
UNKNOWN_SCHEMA_ID = "unknown schema id"
UNDECODABLE = "undecodable value"
UNCONVERTIBLE = "unconvertible value"
REASONS = (NULL_VALUE, NOT_WIRE_FORMAT, UNKNOWN_SCHEMA_ID, UNDECODABLE, UNCONVERTIBLE)

_TIMESTAMP = pa.timestamp("ms", tz="UTC")
QUARANTINE_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("reason", pa.string()), ("error", pa.string()),
    ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
    ("kafka_timestamp", _TIMESTAMP),
    ("source_cluster", pa.string()), ("source_partition", pa.int32()), ("source_offset", pa.int64()),
    ("event_id", pa.string()), ("event_time", _TIMESTAMP), ("datacenter", pa.string()), ("schema_id", pa.int32()),
    ("key", pa.binary()), ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
_HOUR_MS = 3_600_000
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def event_id_of(value: object) -> str | None:
    """``value`` if it is an event id the audit can count (a UUID in its canonical text form), else None."""
    return value if isinstance(value, str) and len(value) == 36 and _UUID.fullmatch(value) else None


class BadRecord(Exception):
    """A record that cannot be loaded: ``reason`` (one of :data:`REASONS`) and the full message."""

    def __init__(self, reason: str, message: str, schema_id: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.schema_id = schema_id


@dataclass(frozen=True)
class Quarantined:
    """One quarantined record as its range counts it: the row, its hour, and what the audit counts it under."""

    row: dict[str, Any]
    date: str
    hour: int
    #: The event time, or the Kafka timestamp of a record without one (ms).
    time_ms: int
    datacenter: str
    event_id: str | None
    size: int


def quarantined_row(run_id: str, topic: str, partition: int, record: Any, bad: BadRecord,
                    lineage: Any) -> Quarantined:
    """The quarantine row of ``record`` (a fetched Record) with its lineage (a mirror Lineage or None)."""
    value = record.value
    found = event_key(value) if value else None
    timestamp = record.timestamp
    time_ms = found.event_time if found is not None else timestamp
    day = _date(time_ms)
    if day is None:  # an event time no calendar holds: the Kafka timestamp's hour
        time_ms = timestamp
        day = _date(time_ms) or "1970-01-01"
    datacenter = found.datacenter if found is not None else (lineage.cluster if lineage is not None else "")
    row = {"run_id": run_id, "reason": bad.reason, "error": bad.message, "kafka_topic": topic,
           "kafka_partition": partition, "kafka_offset": record.offset, "kafka_timestamp": timestamp,
           "source_cluster": None, "source_partition": None, "source_offset": None,
           "event_id": event_id_of(found.event_id) if found is not None else None,
           "event_time": found.event_time if found is not None else None,
           "datacenter": datacenter or None, "schema_id": bad.schema_id,
           "key": record.key, "value": value,
           "headers": [{"key": name, "value": data} for name, data in record.headers or ()]}
    if lineage is not None:
        row["source_cluster"], row["source_partition"], row["source_offset"] = \
            lineage.cluster, lineage.partition, lineage.offset
    return Quarantined(row, day, (time_ms // _HOUR_MS) % 24, time_ms, datacenter,
                       row["event_id"], len(value) if value else 0)


def _date(ms: int) -> str | None:
    try:
        return (datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)).date().isoformat()
    except (OverflowError, ValueError):
        return None


class QuarantineWriter:
    """The quarantined records of one range, written as they come to ``DIRECTORY/date=D/hour=H/part-NNNNN.parquet``
    (NNNNN: the range's index in the run), owner-only; each file appears under its name only once complete
    (:meth:`close`), so a task attempt that dies leaves at most temporary files, and a retried attempt writes the
    same files again."""

    def __init__(self, directory: Path, index: int) -> None:
        self.directory = directory
        self.index = index
        self.rows = 0
        self._writers: dict[tuple[str, int], tuple[pq.ParquetWriter, Any, Path, Path]] = {}

    def write(self, records: Sequence[Quarantined]) -> None:
        by_hour: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for record in records:
            by_hour.setdefault((record.date, record.hour), []).append(record.row)
        for hour, rows in by_hour.items():
            self._writer(hour).write_table(pa.Table.from_pylist(rows, schema=QUARANTINE_SCHEMA))
            self.rows += len(rows)

    def _writer(self, hour: tuple[str, int]) -> pq.ParquetWriter:
        found = self._writers.get(hour)
        if found is None:
            directory = make_private_dir(self.directory / f"date={hour[0]}" / f"hour={hour[1]}")
            final = directory / f"part-{self.index:05d}.parquet"
            temporary = directory / f".{final.name}.{secrets.token_hex(4)}.tmp"
            sink = open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb")
            found = self._writers[hour] = (pq.ParquetWriter(sink, QUARANTINE_SCHEMA), sink, temporary, final)
        return found[0]

    def close(self) -> None:
        """Complete every file: each gets its final name."""
        for writer, sink, temporary, final in self._writers.values():
            writer.close()
            sink.flush()
            os.fsync(sink.fileno())
            sink.close()
            os.replace(temporary, final)
        self._writers.clear()

    def abort(self) -> None:
        """Drop the files begun (a range that failed)."""
        for writer, sink, temporary, _ in self._writers.values():
            try:
                writer.close()
                sink.close()
            finally:
                temporary.unlink(missing_ok=True)
        self._writers.clear()


def quarantine_table(paths: Iterable[Path]) -> pa.Table:
    """The rows of quarantine files, with their ``date`` and ``hour`` (from the directories), in file order."""
    tables = []
    for path in paths:
        table = pq.read_table(path, schema=QUARANTINE_SCHEMA)
        date, hour = path.parent.parent.name.split("=", 1)[1], int(path.parent.name.split("=", 1)[1])
        tables.append(table.append_column("date", pa.array([date] * table.num_rows, pa.string()))
                      .append_column("hour", pa.array([hour] * table.num_rows, pa.int32())))
    if not tables:
        return QUARANTINE_SCHEMA.empty_table().append_column("date", pa.array([], pa.string())) \
            .append_column("hour", pa.array([], pa.int32()))
    return pa.concat_tables(tables)
