"""Replaying the quarantine: once the schema or the code is fixed, the quarantined records that now decode are
loaded into their tables, exactly once, and leave the quarantine in the same commit.

Under the group's run lock (``python -m etl quarantine replay`` takes the ZooKeeper lock as a run does), the
live quarantine files of the chosen topics are read (in the driver: quarantined records are few) and each record
goes through the same conversion as in a task (etl.task's RowBuilder, today's reader schema and registry). A file
with at least one record that now loads is replaced: its loaded records become new table files and the rest a new
quarantine file, published by one manifest that also removes the old file. A file none of whose records loads is
left as it is. The commit's audit step publishes tier-warehouse AuditCount records for the rows loaded (with
``properties.replayed`` = true) and, for each reason and window, a quarantine record with negative counts that
nets out those rows' earlier quarantine record: the audit then finds in the warehouse the events it had named
quarantined, and names them no longer.

    <topic>/date=D/hour=H/<topic>-replayed-<run>-<n>.parquet               rows loaded by a replay
    _quarantine/<topic>/date=D/hour=H/<topic>-replayed-<run>-<n>.parquet   what the replay left in quarantine
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from etl.audit_counts import AuditCounts
from etl.commit import Committer, OfflineCluster
from etl.config import EtlConfig
from etl.files import FILE_MODE, fsync_file
from etl.load import table_schema
from etl.plan import EtlError
from etl.quarantine import QUARANTINE_SCHEMA, BadRecord
from etl.store import Manifest, Move, RunInProgress, Warehouse, new_run_id
from etl.task import Decoder, RowBuilder, convertible, table_arrow_schema
from pipeline.durable_file import make_private_dir
from pipeline.warehouse_state import hour_partition_of
from schemas.events import subject_for
from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError

__all__ = ["REPLAY", "ReplayReport", "replay_quarantine"]

log = logging.getLogger(__name__)

REPLAY = "replay"
_TIMESTAMPS = ("kafka_timestamp", "event_time")


@dataclass
class ReplayReport:
    """What a replay did: per topic the records loaded and those still quarantined, topics it could not try."""

    run_id: str
    loaded: dict[str, int] = field(default_factory=dict)
    still_quarantined: dict[str, int] = field(default_factory=dict)
    topic_errors: dict[str, str] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.loaded.values())


def replay_quarantine(config: EtlConfig, *, topics: set[str] | None = None, run: str | None = None,
                      still_locked: Callable[[], bool] | None = None) -> ReplayReport:
    """Load the quarantined records of ``topics`` (None: every topic), of the run ``run`` only if given, that now
    decode; see the module's text. EtlError when the replay cannot be done (nothing is changed then)."""
    warehouse = Warehouse(config.warehouse, config["group.id"])
    report = ReplayReport(new_run_id())
    try:
        with warehouse.exclusive():
            offline = OfflineCluster(config)
            try:
                committer = Committer(config, warehouse, offline, still_locked)
                committer.recover()
                try:
                    manifest = _replay(config, warehouse, report, topics, run)
                    if manifest.files or manifest.removed:
                        committer.commit(manifest)
                finally:
                    if not warehouse.journal_path(report.run_id).exists():
                        warehouse.discard(report.run_id)
            finally:
                offline.close()
    except RunInProgress as error:
        raise EtlError(str(error)) from None
    except (SchemaRegistryError, OSError) as error:
        raise EtlError(f"{type(error).__name__}: {error}") from None
    log.info("replay %s: %d records loaded, %d still quarantined", report.run_id, report.rows,
             sum(report.still_quarantined.values()))
    return report


def _replay(config: EtlConfig, warehouse: Warehouse, report: ReplayReport, topics: set[str] | None,
            run: str | None) -> Manifest:
    files = {topic: paths for topic, paths in warehouse.snapshot().quarantine_files().items()
             if topics is None or topic in topics}
    audit = AuditCounts(config["audit.window.ms"])
    moves: list[Move] = []
    removed: list[str] = []
    with SchemaRegistryClient.from_config(config) as registry:
        for topic, paths in sorted(files.items()):
            try:
                reader = registry.latest(subject_for(topic))[2].text
            except SchemaRegistryError as error:
                report.topic_errors[topic] = f"no reader schema (subject {subject_for(topic)}): {error}"
                continue
            replayer = _TopicReplay(config, warehouse, report.run_id, topic, Decoder(registry, reader), reader, audit)
            for path in paths:
                loaded, kept = replayer.file(path, run)
                report.loaded[topic] = report.loaded.get(topic, 0) + loaded
                report.still_quarantined[topic] = report.still_quarantined.get(topic, 0) + kept
            moves += replayer.moves
            removed += replayer.replaced
    for move in moves:
        fsync_file(warehouse.root / move.staged)
    return Manifest(report.run_id, [], moves, audit=audit.records(report.run_id, {"replayed": "true"}),
                    removed=removed, kind=REPLAY)


class _TopicReplay:
    """The replay of one topic's quarantine files: what it stages, and the files it replaces."""

    def __init__(self, config: EtlConfig, warehouse: Warehouse, run_id: str, topic: str, decoder: Decoder,
                 reader: str, audit: AuditCounts) -> None:
        self.warehouse = warehouse
        self.run_id = run_id
        self.topic = topic
        self.decoder = decoder
        self.window_ms = config["audit.window.ms"]
        self.audit = audit
        reader_schema = json.loads(reader)
        self.arrow_schema = table_arrow_schema(reader_schema)
        from pyspark.sql.pandas.types import to_arrow_schema

        self.target = to_arrow_schema(table_schema(reader_schema), timezone="UTC")
        self.moves: list[Move] = []
        self.replaced: list[str] = []
        self._numbers: dict[str, int] = {}

    def file(self, path: str, run: str | None) -> tuple[int, int]:
        """Try every record of the quarantine file ``path``; (records loaded, records left)."""
        table = pq.read_table(self.warehouse.root / path, schema=QUARANTINE_SCHEMA)
        for name in _TIMESTAMPS:
            table = table.set_column(table.schema.get_field_index(name), name, table[name].cast(pa.int64()))
        records = table.to_pylist()
        rows, marks, loaded, kept = [], [], [], []
        for quarantined in records:
            if run is not None and quarantined["run_id"] != run:
                kept.append(quarantined)
                continue
            builder = RowBuilder(self.topic, quarantined["kafka_partition"], self.decoder, self.window_ms)
            record = SimpleNamespace(offset=quarantined["kafka_offset"], timestamp=quarantined["kafka_timestamp"],
                                     key=quarantined["key"], value=quarantined["value"],
                                     headers=tuple((h["key"], h["value"]) for h in quarantined["headers"] or ()))
            try:
                built = builder.row(record)
            except BadRecord:
                kept.append(quarantined)
                continue
            if built is None:
                kept.append(quarantined)
                continue
            rows.append(built[0])
            marks.append(built[1])
            loaded.append(quarantined)
        if not rows:
            return 0, len(kept)
        batch, refused = convertible(rows, self.arrow_schema, self.target)
        if refused:
            gone = {index for index, _ in refused}
            kept += [loaded[index] for index in sorted(gone)]
            marks = [mark for index, mark in enumerate(marks) if index not in gone]
            loaded = [record for index, record in enumerate(loaded) if index not in gone]
        if batch.num_rows == 0:
            return 0, len(kept)
        self._stage_rows(batch)
        if kept:
            self._stage_kept(path, kept)
        self.replaced.append(path)
        now_s = time.time()
        for record in loaded:
            time_ms = record["event_time"] if record["event_time"] is not None else record["kafka_timestamp"]
            self.audit.unquarantine(self.topic, record["reason"], record["datacenter"] or "", time_ms,
                                    record["event_id"], len(record["value"] or b""))
        for (datacenter, start), event_id, size, event_ms in marks:
            self.audit.add_rows(self.topic, datacenter, start, [event_id] if event_id else [], size,
                                [now_s - event_ms / 1000])
        return batch.num_rows, len(kept)

    def _stage_rows(self, batch: pa.RecordBatch) -> None:
        table = pa.Table.from_batches([batch])
        dates, hours = table["date"].to_pylist(), table["hour"].to_pylist()
        data = table.drop_columns(["date", "hour"])
        for date, hour in sorted(set(zip(dates, hours))):
            mask = pa.array([d == date and h == hour for d, h in zip(dates, hours)])
            directory = f"{self.topic}/date={date}/hour={hour}"
            self._stage(directory, data.filter(mask))

    def _stage_kept(self, path: str, kept: list[dict[str, Any]]) -> None:
        partition = hour_partition_of(path)
        assert partition is not None and partition.quarantine
        table = pa.Table.from_pylist(kept, schema=QUARANTINE_SCHEMA.set(
            QUARANTINE_SCHEMA.get_field_index("kafka_timestamp"), pa.field("kafka_timestamp", pa.int64())).set(
            QUARANTINE_SCHEMA.get_field_index("event_time"), pa.field("event_time", pa.int64())))
        self._stage(partition.directory, table.cast(QUARANTINE_SCHEMA))

    def _stage(self, directory: str, table: pa.Table) -> None:
        """Stage ``table`` as the next replayed file of ``directory`` (a table's or the quarantine's hour)."""
        number = self._numbers[directory] = self._numbers.get(directory, -1) + 1
        name = f"{self.topic}-replayed-{self.run_id}-{number}.parquet"
        staged = make_private_dir(self.warehouse.staging_dir(self.run_id) / directory) / name
        with open(os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb") as sink:
            pq.write_table(table, sink)
        self.moves.append(Move(str(staged.relative_to(self.warehouse.root)), f"{directory}/{name}", -1,
                               table.num_rows, staged.stat().st_size))

