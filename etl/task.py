"""What one Spark task does with one range: fetch it with the SimpleConsumer, decode it, yield Arrow batches.

Runs in the executors' Python workers (``DataFrame.mapInArrow``): everything it needs travels in a
:class:`TaskContext` (plain values). A task reads its range [start, end) from the partition's leader until
it reaches ``end`` (offsets missing inside the range -- compacted, aborted, control batches -- are simply
not there), decodes each value in the Confluent wire format with the writer schema fetched once per id
from the registry (one client per process) into the topic's reader schema, and yields one Arrow batch per
fetch: the event's fields, the lineage columns and the event time's ``date`` and ``hour`` (UTC; a record
without ``header.eventTime`` uses its Kafka timestamp).

A record that cannot become a row (no value, not in the wire format, a schema id the registry does not know, a
value that does not decode into the reader schema, a row Arrow refuses) is a :class:`~etl.quarantine.BadRecord`:
with on.bad.record=quarantine the task writes it to the run's staged quarantine (etl.quarantine) and goes on;
with fail it fails the task naming topic, partition and offset. A registry that cannot be reached fails the
task: nothing is quarantined for a passing fault.

What the task loaded (rows, message bytes, audit counts per datacenter and window, quarantined records per
reason, datacenter and window, its start time, offsets retention deleted under it) goes into a dict accumulator
keyed by range index, so a task run twice reports once.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import time
from dataclasses import dataclass
from typing import Any, Iterator

from pathlib import Path

import fastavro
import pyarrow as pa
from fastavro.read import SchemaResolutionError
from fastavro.schema import SchemaParseException
from pyspark.accumulators import AccumulatorParam

from etl.avro_types import raw_arrow_schema, without_logical_types
from etl.columns import FetchColumns, day_text, fetch_columns, header_columns_fit
from etl.quarantine import (
    NOT_WIRE_FORMAT,
    NULL_VALUE,
    UNCONVERTIBLE,
    UNDECODABLE,
    UNKNOWN_SCHEMA_ID,
    BadRecord,
    Quarantined,
    event_id_of,
    QuarantineWriter,
    quarantined_row,
)
from pipeline.auditing.latency import LatencyBuckets
from pipeline.auditing.sketch import EventSketch
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.errors import KafkaClientError, KafkaConnectionError, OffsetOutOfRange
from pipeline.client.isolation import READ_COMMITTED
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.lineage import lineage_of
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity
from pipeline.testing_faults import Faults
from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError
from schemas.registry_client_settings import NO_REGISTRY_SECURITY, RegistryClientSettings
from schemas.serde import WireFormatError, schema_id_of

__all__ = ["Decoder", "LINEAGE_FIELDS", "PARTITION_COLUMNS", "RangeStats", "RowBuilder", "StatsParam",
           "TaskContext", "TaskError", "load_ranges", "table_arrow_schema"]

#: Columns every table has after the event's own fields: where the record was in the offline cluster and,
#: for a mirrored record, in its source cluster (null otherwise).
LINEAGE_FIELDS = (("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
                  ("kafka_timestamp", pa.timestamp("ms", tz="UTC")), ("source_cluster", pa.string()),
                  ("source_partition", pa.int32()), ("source_offset", pa.int64()))
#: The directories of a table: the event time's UTC date and hour.
PARTITION_COLUMNS = (("date", pa.string()), ("hour", pa.int32()))

TASK_ERROR = "etl task error: "
_PREFIX_SIZE = 5
_NOT_LEADER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
_ATTEMPTS = 10
#: What fastavro and our checks raise for bytes that do not decode into the reader schema.
_UNDECODABLE = (WireFormatError, ValueError, TypeError, EOFError, IndexError, KeyError, OverflowError,
                SchemaResolutionError)
#: What Arrow raises for values it cannot put in the table's columns.
_UNCONVERTIBLE = (pa.ArrowException, ValueError, TypeError, OverflowError)

_registries: dict[tuple[str, RegistryClientSettings], SchemaRegistryClient] = {}


class TaskError(Exception):
    """A range could not be loaded; the message names topic, partition and offset."""

    def __init__(self, message: str) -> None:
        super().__init__(TASK_ERROR + message)


@dataclass(frozen=True)
class TaskContext:
    """What the tasks of one topic need: brokers, registry, the reader schema (JSON text), fetch settings, and
    where bad records go (``quarantine_dir``: the topic's staged quarantine; None: on.bad.record=fail)."""

    topic: str
    brokers: str
    registry_url: str
    reader_schema: str
    fetch_size: int
    skip_out_of_range: bool
    run_id: str = ""
    quarantine_dir: str | None = None
    #: Fault injection (tests and drills only).
    faults: Faults = Faults()
    #: The registry's login and TLS trust.
    registry_settings: RegistryClientSettings = NO_REGISTRY_SECURITY
    #: How the tasks connect to the brokers (it travels to the executors with the context).
    security: ClientSecurity = PLAINTEXT_SECURITY
    #: read_committed (1): aborted transactions and control batches are left out (the range ends at or before the
    #: last stable offset, where the planner found it).
    isolation_level: int = READ_COMMITTED


RangeStats = dict[str, Any]


class StatsParam(AccumulatorParam):
    """Accumulates {range index: stats}; a later report of a range replaces the earlier one."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:
        value1.update(value2)
        return value1


def table_arrow_schema(reader_schema: dict[str, Any]) -> pa.Schema:
    """The raw Arrow schema of a topic's batches: the event's fields, lineage, date and hour."""
    event = raw_arrow_schema(reader_schema)
    return pa.schema([*event, *(pa.field(n, t) for n, t in LINEAGE_FIELDS),
                      *(pa.field(n, t) for n, t in PARTITION_COLUMNS)])


def _registry(url: str, settings: RegistryClientSettings = NO_REGISTRY_SECURITY) -> SchemaRegistryClient:
    client = _registries.get((url, settings))
    if client is None:
        client = _registries[(url, settings)] = SchemaRegistryClient(url, settings=settings)
    return client


class Decoder:
    """Wire-format values of one topic into reader-schema dicts (raw logical values), writers cached by id, ids the
    registry does not know remembered (one look-up per id per task).

    A writer schema identical to the reader's (the usual case: the events were written with the subject's latest
    version) decodes without fastavro's schema resolution, which would map every field onto itself (measured: 40%
    of the decode's CPU)."""

    def __init__(self, registry: SchemaRegistryClient, reader_schema: str) -> None:
        self.registry = registry
        self.reader = fastavro.parse_schema(without_logical_types(json.loads(reader_schema)))
        #: schema id -> (the parsed writer schema, the reader schema to resolve it into or None if they are equal).
        self.writers: dict[int, tuple[Any, Any]] = {}
        self.unknown: dict[int, str] = {}

    def decode(self, value: bytes | None) -> dict[str, Any]:
        """The record ``value`` holds; BadRecord when it cannot be decoded, SchemaRegistryError when the registry
        cannot be asked."""
        if value is None:
            raise BadRecord(NULL_VALUE, "the record has no value to decode")
        try:
            schema_id = schema_id_of(value)
        except WireFormatError as error:
            raise BadRecord(NOT_WIRE_FORMAT, f"cannot decode the value: {error}") from None
        found = self.writers.get(schema_id)
        if found is None:
            found = self._writer(schema_id)
        stream = io.BytesIO(value)
        stream.seek(_PREFIX_SIZE)
        try:
            record = fastavro.schemaless_reader(stream, *found)
        except _UNDECODABLE as error:
            raise BadRecord(UNDECODABLE, f"cannot decode the value: {type(error).__name__}: {error}",
                            schema_id) from None
        if stream.tell() != len(value):
            raise BadRecord(UNDECODABLE, f"cannot decode the value: {len(value) - stream.tell()} bytes left after "
                                         f"the record (schema id {schema_id})", schema_id)
        return record

    def _writer(self, schema_id: int) -> tuple[Any, Any]:
        known = self.unknown.get(schema_id)
        if known is not None:
            raise BadRecord(UNKNOWN_SCHEMA_ID, known, schema_id)
        try:
            text = self.registry.schema(schema_id).text
        except SchemaRegistryError as error:
            if error.status != 404:
                raise
            message = self.unknown[schema_id] = f"cannot decode the value: unknown schema id {schema_id}: {error}"
            raise BadRecord(UNKNOWN_SCHEMA_ID, message, schema_id) from None
        try:
            writer = fastavro.parse_schema(without_logical_types(json.loads(text)))
        except (SchemaParseException, ValueError, TypeError, KeyError) as error:
            raise BadRecord(UNDECODABLE, f"cannot decode the value: the writer schema {schema_id} does not parse: "
                                         f"{error}", schema_id) from None
        found = self.writers[schema_id] = (writer, None if writer == self.reader else self.reader)
        return found


#: What the audit counts a row under: ((datacenter, window start), event id or None, message bytes, event time ms).
Mark = tuple[tuple[str, int], "str | None", int, int]


class RowBuilder:
    """Records of one topic-partition into rows of its table: the decoded event, its lineage columns, the event
    time's date and hour; and for each row what the audit counts it under (a :data:`Mark`). Shared by the tasks
    and the quarantine's replay."""

    def __init__(self, topic: str, partition: int, decoder: Decoder, window_ms: int,
                 drop: frozenset[str] = frozenset()) -> None:
        self.topic = topic
        self.partition = partition
        self.decoder = decoder
        self.window_ms = window_ms
        self.drop = drop
        #: The text of each day seen (etl.columns.day_text).
        self.days: dict[int, str] = {}

    def row(self, record: Any) -> tuple[dict[str, Any], Mark] | None:
        """The row of ``record`` (a fetched Record) and its mark; None for an event the fault injection drops.
        BadRecord when it cannot be a row."""
        value = record.value
        row = self.decoder.decode(value)
        header = row.get("header")
        if not isinstance(header, dict):
            header = {}
        drop = self.drop
        if drop and header.get("eventId") in drop:
            return None
        event_ms = header.get("eventTime")
        if not isinstance(event_ms, int):
            event_ms = record.timestamp
        try:
            day = day_text(event_ms, self.days)
        except (ValueError, OverflowError):
            raise BadRecord(UNCONVERTIBLE, f"cannot convert the value to a row: its event time {event_ms} ms is "
                                           f"outside the calendar", schema_id_of(value)) from None
        row["kafka_topic"] = self.topic
        row["kafka_partition"] = self.partition
        row["kafka_offset"] = record.offset
        row["kafka_timestamp"] = record.timestamp
        if record.headers:
            lineage = lineage_of(self.topic, record.headers)
            if lineage is not None:
                row["source_cluster"] = lineage.cluster
                row["source_partition"] = lineage.partition
                row["source_offset"] = lineage.offset
        row["date"] = day
        row["hour"] = (event_ms // 3_600_000) % 24
        event_id = header.get("eventId")
        if not isinstance(event_id, str) or len(event_id) != 36:
            event_id = None  # one that is not a UUID all the same is left out of the sketch (_sketch_text)
        return row, ((str(header.get("datacenter", "")), event_ms - event_ms % self.window_ms), event_id,
                     len(value), event_ms)


def to_batch(rows: list[dict[str, Any]], arrow_schema: pa.Schema, target: pa.Schema) -> pa.RecordBatch:
    """Rows as one Arrow batch of the table's Spark types; raises what Arrow raises for a value it refuses."""
    return pa.RecordBatch.from_pylist(rows, schema=arrow_schema).cast(target)


def convertible(rows: list[dict[str, Any]], arrow_schema: pa.Schema,
                target: pa.Schema) -> tuple[pa.RecordBatch, list[tuple[int, BadRecord]]]:
    """Rows as one batch, the rows Arrow refuses left out: (the batch, [(index of a refused row, why)])."""
    try:
        return to_batch(rows, arrow_schema, target), []
    except _UNCONVERTIBLE:
        pass
    good, refused = [], []
    for index, row in enumerate(rows):
        try:
            to_batch([row], arrow_schema, target)
        except _UNCONVERTIBLE as error:
            refused.append((index, BadRecord(UNCONVERTIBLE, f"cannot convert the value to a row: "
                                                            f"{type(error).__name__}: {error}")))
        else:
            good.append(row)
    return to_batch(good, arrow_schema, target), refused


class _RangeLoader:
    """Reads one range and turns each fetch into an Arrow batch; keeps the range's stats and quarantines what
    cannot be loaded."""

    def __init__(self, context: TaskContext, decoder: Decoder, arrow_schema: pa.Schema, target: pa.Schema,
                 window_ms: int, partition: int, start: int, end: int,
                 quarantine: QuarantineWriter | None) -> None:
        self.context = context
        self.builder = RowBuilder(context.topic, partition, decoder, window_ms, context.faults.drop_event_ids)
        self.arrow_schema = arrow_schema
        self.target = target
        added = len(LINEAGE_FIELDS) + len(PARTITION_COLUMNS)
        self.event_schema = pa.schema(list(arrow_schema)[:-added])
        #: Whether fetches are loaded column by column (etl.columns) rather than row by row (RowBuilder).
        self.columnar = not context.faults.drop_event_ids and header_columns_fit(self.event_schema)
        self.window_ms = window_ms
        self.partition = partition
        self.start = start
        self.end = end
        self.quarantine = quarantine
        self.rows = 0
        self.bytes = 0
        self.windows: dict[tuple[str, int], list[int]] = {}
        #: How long after its event time each row of a window was loaded (pipeline.auditing.latency).
        self.window_latency: dict[tuple[str, int], LatencyBuckets] = {}
        #: The event ids of each window, for the audit's sketch.
        self.window_ids: dict[tuple[str, int], list[str]] = {}
        #: Quarantined records per (reason, datacenter, window): [with an id, their bytes, ids, without an id].
        self.quarantined: dict[tuple[str, str, int], list[Any]] = {}
        self.skipped: list[tuple[int, int]] = []

    def batches(self) -> Iterator[pa.RecordBatch]:
        context = self.context
        cluster = Cluster(StaticBrokerList(context.brokers), client_id="etl-task", security=context.security)
        consumer: SimpleConsumer | None = None
        offset, stuck = self.start, 0
        try:
            while offset < self.end:
                try:
                    if consumer is None:
                        consumer = self._consumer(cluster)
                    messages = consumer.fetch(FetchRequest(context.topic, self.partition, offset, context.fetch_size))
                    loaded = self._columns(messages, offset) if self.columnar else None
                    if loaded is None:
                        rows, marks, sources, bad = self._rows(messages, offset)
                except OffsetOutOfRange as error:
                    offset = self._out_of_range(offset, error)
                    continue
                except (KafkaProtocolError, KafkaConnectionError) as error:
                    # The leader moved or is down: ask the cluster again, a few times, then fail.
                    retriable = not isinstance(error, KafkaProtocolError) or error.code in _NOT_LEADER
                    if not retriable or stuck >= _ATTEMPTS:
                        raise TaskError(f"{self._where(offset)}: {error}") from None
                    stuck += 1
                    if consumer is not None:
                        consumer.close()
                        consumer = None
                    time.sleep(0.2 * stuck)
                    cluster.refresh([context.topic])
                    continue
                except SchemaRegistryError as error:
                    raise TaskError(f"{self._where(offset)}: the writer schema could not be read: {error}") from None
                if messages.next_offset <= offset:
                    stuck += 1
                    if stuck >= _ATTEMPTS:
                        raise TaskError(f"{self._where(offset)}: the broker returns nothing below the range's end "
                                        f"{self.end} (high watermark {messages.high_watermark})")
                    time.sleep(0.1 * stuck)
                    continue
                stuck = 0
                offset = messages.next_offset
                batch = None
                if loaded is not None:
                    batch, bad = loaded.batch, loaded.bad
                    self._add(loaded)
                elif rows:
                    batch, refused = convertible(rows, self.arrow_schema, self.target)
                    if refused:
                        gone = {index for index, _ in refused}
                        bad += [(sources[index], error) for index, error in refused]
                        marks = [mark for index, mark in enumerate(marks) if index not in gone]
                    self._count(marks)
                if bad:
                    self._set_aside(bad)
                if batch is not None and batch.num_rows:
                    yield batch
        except (KafkaClientError, OSError) as error:
            raise TaskError(f"{self._where(offset)}: {error}") from None
        finally:
            if consumer is not None:
                consumer.close()
            cluster.close()

    def _consumer(self, cluster: Cluster) -> SimpleConsumer:
        topic = self.context.topic
        leader = cluster.leader(topic, self.partition)
        address = cluster.brokers().get(leader)
        if address is None:
            raise KafkaProtocolError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{self.partition} has no leader")
        return SimpleConsumer(address[0], address[1], client_id="etl-task",
                              buffer_size=self.context.fetch_size, max_buffer_size=max(self.context.fetch_size,
                                                                                      64 << 20),
                              security=self.context.security, isolation_level=self.context.isolation_level)

    def _out_of_range(self, offset: int, error: OffsetOutOfRange) -> int:
        log_start = getattr(error, "log_start_offset", -1)
        if not self.context.skip_out_of_range or log_start is None or log_start <= offset:
            raise TaskError(f"{self._where(offset)}: retention deleted offsets of the range while it loaded "
                            f"(log start now {log_start}): {error}")
        resume = min(log_start, self.end)
        self.skipped.append((offset, resume))
        return resume

    def _where(self, offset: int) -> str:
        return f"{self.context.topic}-{self.partition} offset {offset}"

    def _columns(self, messages: Any, offset: int) -> FetchColumns | None:
        """One fetch loaded column by column (None: take the row path for it); with on.bad.record=fail the first
        record that cannot be a row fails the task."""
        loaded = fetch_columns(messages, offset, self.end, self.context.topic, self.partition,
                               self.builder.decoder.decode, self.event_schema, self.arrow_schema, self.target,
                               self.window_ms, time.time(), self.builder.days)
        if loaded is not None and loaded.bad and self.quarantine is None:
            record, error = loaded.bad[0]
            raise TaskError(f"{self._where(record.offset)}: {error.message}")
        return loaded

    def _add(self, loaded: FetchColumns) -> None:
        """Count the rows of a fetch loaded column by column under their datacenter and window."""
        for key, counts in loaded.windows.items():
            found = self.windows.get(key)
            if found is None:
                found = self.windows[key] = [0, 0]
                self.window_ids[key] = []
                self.window_latency[key] = LatencyBuckets()
            found[0] += counts.rows
            found[1] += counts.bytes
            self.window_ids[key] += counts.ids
            self.window_latency[key].merge(counts.latency)
            self.rows += counts.rows
            self.bytes += counts.bytes

    def _rows(self, messages: Any, offset: int) -> tuple[list[dict[str, Any]], list[Mark], list[Any],
                                                         list[tuple[Any, BadRecord]]]:
        """The rows of one fetch from ``offset`` to the range's end, their marks and records, and the records that
        cannot be rows (with why)."""
        end, row_of = self.end, self.builder.row
        rows: list[dict[str, Any]] = []
        marks: list[Mark] = []
        sources: list[Any] = []
        bad: list[tuple[Any, BadRecord]] = []
        for record in messages:
            if record.offset < offset:
                continue
            if record.offset >= end:
                break
            try:
                built = row_of(record)
            except BadRecord as error:
                if self.quarantine is None:
                    raise TaskError(f"{self._where(record.offset)}: {error.message}") from None
                bad.append((record, error))
                continue
            if built is not None:
                rows.append(built[0])
                marks.append(built[1])
                sources.append(record)
        return rows, marks, sources, bad

    def _count(self, marks: list[Mark]) -> None:
        """Count loaded rows under their datacenter and window."""
        windows, window_ids, latencies, now_s = self.windows, self.window_ids, self.window_latency, time.time()
        size = 0
        for key, event_id, length, event_ms in marks:
            counts = windows.get(key)
            if counts is None:
                counts = windows[key] = [0, 0]
                window_ids[key] = []
                latencies[key] = LatencyBuckets()
            latencies[key].add(now_s - event_ms / 1000)
            counts[0] += 1
            counts[1] += length
            if event_id is not None:
                window_ids[key].append(event_id)
            size += length
        self.rows += len(marks)
        self.bytes += size

    def _set_aside(self, bad: list[tuple[Any, BadRecord]]) -> None:
        """Write records that cannot be rows to the quarantine and count them (on.bad.record=quarantine)."""
        if self.quarantine is None:
            record, error = bad[0]
            raise TaskError(f"{self._where(record.offset)}: {error.message}")
        context, window_ms = self.context, self.window_ms
        records: list[Quarantined] = []
        for record, error in sorted(bad, key=lambda item: item[0].offset):
            lineage = lineage_of(context.topic, record.headers) if record.headers else None
            found = quarantined_row(context.run_id, context.topic, self.partition, record, error, lineage)
            records.append(found)
            key = (error.reason, found.datacenter, found.time_ms - found.time_ms % window_ms)
            counts = self.quarantined.get(key)
            if counts is None:
                counts = self.quarantined[key] = [0, 0, [], 0]
            if found.event_id is not None:
                counts[0] += 1
                counts[1] += found.size
                counts[2].append(found.event_id)
            else:
                counts[3] += 1
        self.quarantine.write(records)

    def stats(self, started: float) -> RangeStats:
        return {"rows": self.rows, "bytes": self.bytes, "started": started, "host": socket.gethostname(),
                "windows": [[dc, start, c, b, _sketch_text(self.window_ids.get((dc, start))),
                             self.window_latency[(dc, start)].to_text()]
                            for (dc, start), (c, b) in sorted(self.windows.items())],
                "quarantined": [[reason, dc, start, c, b, _sketch_text(ids), without]
                                for (reason, dc, start), (c, b, ids, without) in sorted(self.quarantined.items())],
                "skipped": [list(s) for s in self.skipped]}


def _sketch_text(ids: list[str] | None) -> str | None:
    """The audit sketch of a window's event ids, base64 (it travels in Spark's accumulator and the manifest).
    Ids that are not UUIDs are left out (checked here, once per window, rather than per row)."""
    if not ids:
        return None
    sketch = EventSketch()
    try:
        sketch.add(ids)
    except ValueError:  # pipeline.auditing.sketch.SketchError, or bytes.fromhex on what is not hex
        sketch = EventSketch()
        sketch.add([i for i in ids if event_id_of(i) is not None])
    return base64.b64encode(sketch.to_bytes()).decode()


def load_ranges(context: TaskContext, window_ms: int, accumulator: Any, target: pa.Schema,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: for each (index, partition, start, end) row, the range's Arrow batches, cast
    to ``target`` (Spark's Arrow form of the table's schema), its bad records written to the staged quarantine."""
    started = time.time()
    decoder = Decoder(_registry(context.registry_url, context.registry_settings), context.reader_schema)
    arrow_schema = table_arrow_schema(json.loads(context.reader_schema))
    for batch in batches:
        for item in batch.to_pylist():
            quarantine = None if context.quarantine_dir is None else \
                QuarantineWriter(Path(context.quarantine_dir), item["index"])
            loader = _RangeLoader(context, decoder, arrow_schema, target, window_ms, item["partition"],
                                  item["start"], item["end"], quarantine)
            try:
                for loaded in loader.batches():
                    yield loaded
                    context.faults.pause("loading")
                if quarantine is not None:
                    quarantine.close()
            except BaseException:
                if quarantine is not None:
                    quarantine.abort()
                raise
            accumulator.add({item["index"]: loader.stats(started)})
