"""What one Spark task does with one range: fetch it with the SimpleConsumer, decode it, yield Arrow batches.

Runs in the executors' Python workers (``DataFrame.mapInArrow``): everything it needs travels in a
:class:`TaskContext` (plain values). A task reads its range [start, end) from the partition's leader until
it reaches ``end`` (offsets missing inside the range -- compacted, aborted, control batches -- are simply
not there), decodes each value in the Confluent wire format with the writer schema fetched once per id
from the registry (one client per process) into the topic's reader schema, and yields one Arrow batch per
fetch: the event's fields, the lineage columns and the event time's ``date`` and ``hour`` (UTC; a record
without ``header.eventTime`` uses its Kafka timestamp). A value that does not decode fails the task naming
topic, partition and offset. What the task loaded (rows, message bytes, audit counts per datacenter and
window, its start time, offsets retention deleted under it) goes into a dict accumulator keyed by range
index, so a task run twice reports once.
"""

from __future__ import annotations

import base64
import datetime
import io
import json
import socket
import time
from dataclasses import dataclass
from typing import Any, Iterator

import fastavro
import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from audit.latency import LatencyBuckets
from audit.sketch import EventSketch
from etl.faults import dropped_event_ids, pause_at
from etl.avro_types import raw_arrow_schema, without_logical_types
from mirror.lineage import lineage_of
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.errors import KafkaClientError, KafkaConnectionError, OffsetOutOfRange
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import WireFormatError, schema_id_of

__all__ = ["LINEAGE_FIELDS", "PARTITION_COLUMNS", "RangeStats", "StatsParam", "TaskContext", "TaskError",
           "load_ranges", "table_arrow_schema"]

#: Columns every table has after the event's own fields: where the record was in the offline cluster and,
#: for a mirrored record, in its source cluster (null otherwise).
LINEAGE_FIELDS = (("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
                  ("kafka_timestamp", pa.timestamp("ms", tz="UTC")), ("source_cluster", pa.string()),
                  ("source_partition", pa.int32()), ("source_offset", pa.int64()))
#: The directories of a table: the event time's UTC date and hour.
PARTITION_COLUMNS = (("date", pa.string()), ("hour", pa.int32()))

TASK_ERROR = "etl task error: "
_PREFIX_SIZE = 5
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_NOT_LEADER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
_ATTEMPTS = 10

_registries: dict[str, SchemaRegistryClient] = {}


class TaskError(Exception):
    """A range could not be loaded; the message names topic, partition and offset."""

    def __init__(self, message: str) -> None:
        super().__init__(TASK_ERROR + message)


@dataclass(frozen=True)
class TaskContext:
    """What the tasks of one topic need: brokers, registry, the reader schema (JSON text), fetch settings."""

    topic: str
    brokers: str
    registry_url: str
    reader_schema: str
    fetch_size: int
    skip_out_of_range: bool


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


def _registry(url: str) -> SchemaRegistryClient:
    client = _registries.get(url)
    if client is None:
        client = _registries[url] = SchemaRegistryClient(url)
    return client


class _Decoder:
    """Wire-format values of one topic into reader-schema dicts (raw logical values), writers cached by id."""

    def __init__(self, context: TaskContext) -> None:
        self.registry = _registry(context.registry_url)
        self.reader = fastavro.parse_schema(without_logical_types(json.loads(context.reader_schema)))
        self.writers: dict[int, Any] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        schema_id = schema_id_of(value)
        writer = self.writers.get(schema_id)
        if writer is None:
            text = self.registry.schema(schema_id).text
            writer = self.writers[schema_id] = fastavro.parse_schema(without_logical_types(json.loads(text)))
        stream = io.BytesIO(value)
        stream.seek(_PREFIX_SIZE)
        record = fastavro.schemaless_reader(stream, writer, self.reader)
        if stream.tell() != len(value):
            raise WireFormatError(f"{len(value) - stream.tell()} bytes left after the record (schema id {schema_id})")
        return record


def _day(ms: int, cache: dict[int, str]) -> str:
    days = ms // 86_400_000
    text = cache.get(days)
    if text is None:
        text = cache[days] = datetime.date.fromordinal(_EPOCH_ORDINAL + days).isoformat()
    return text


class _RangeLoader:
    """Reads one range and turns each fetch into an Arrow batch; keeps the range's stats."""

    def __init__(self, context: TaskContext, decoder: _Decoder, arrow_schema: pa.Schema, window_ms: int,
                 partition: int, start: int, end: int) -> None:
        self.context = context
        self.decoder = decoder
        self.arrow_schema = arrow_schema
        self.window_ms = window_ms
        self.partition = partition
        self.start = start
        self.end = end
        self.rows = 0
        self.bytes = 0
        self.windows: dict[tuple[str, int], list[int]] = {}
        self._drop = dropped_event_ids()
        #: How long after its event time each row of a window was loaded (audit.latency).
        self.window_latency: dict[tuple[str, int], LatencyBuckets] = {}
        #: The event ids of each window, for the audit's sketch.
        self.window_ids: dict[tuple[str, int], list[str]] = {}
        self.skipped: list[tuple[int, int]] = []
        self._days: dict[int, str] = {}

    def batches(self) -> Iterator[pa.RecordBatch]:
        context = self.context
        cluster = Cluster(StaticBrokerList(context.brokers), client_id="etl-task")
        consumer: SimpleConsumer | None = None
        offset, stuck = self.start, 0
        try:
            while offset < self.end:
                try:
                    if consumer is None:
                        consumer = self._consumer(cluster)
                    messages = consumer.fetch(FetchRequest(context.topic, self.partition, offset, context.fetch_size))
                    rows = self._rows(messages, offset)
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
                if messages.next_offset <= offset:
                    stuck += 1
                    if stuck >= _ATTEMPTS:
                        raise TaskError(f"{self._where(offset)}: the broker returns nothing below the range's end "
                                        f"{self.end} (high watermark {messages.high_watermark})")
                    time.sleep(0.1 * stuck)
                    continue
                stuck = 0
                offset = messages.next_offset
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=self.arrow_schema)
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
                                                                                      64 << 20))

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

    def _rows(self, messages: Any, offset: int) -> list[dict[str, Any]]:
        topic, partition, end, window_ms = self.context.topic, self.partition, self.end, self.window_ms
        decode, windows, window_ids, days = self.decoder.decode, self.windows, self.window_ids, self._days
        drop, latencies, now_s = self._drop, self.window_latency, time.time()
        rows = []
        for record in messages:
            if record.offset < offset:
                continue
            if record.offset >= end:
                break
            value = record.value
            if value is None:
                raise TaskError(f"{topic}-{partition} offset {record.offset}: the record has no value to decode")
            try:
                row = decode(value)
            except (WireFormatError, ValueError, TypeError, EOFError, IndexError, KeyError) as error:
                raise TaskError(f"{topic}-{partition} offset {record.offset}: cannot decode the value: "
                                f"{type(error).__name__}: {error}") from None
            header = row.get("header")
            if drop and isinstance(header, dict) and header.get("eventId") in drop:
                continue
            event_ms = header.get("eventTime") if isinstance(header, dict) else None
            if not isinstance(event_ms, int):
                event_ms = record.timestamp
            datacenter = header.get("datacenter", "") if isinstance(header, dict) else ""
            lineage = lineage_of(topic, record.headers) if record.headers else None
            row["kafka_topic"] = topic
            row["kafka_partition"] = partition
            row["kafka_offset"] = record.offset
            row["kafka_timestamp"] = record.timestamp
            if lineage is not None:
                row["source_cluster"] = lineage.cluster
                row["source_partition"] = lineage.partition
                row["source_offset"] = lineage.offset
            row["date"] = _day(event_ms, days)
            row["hour"] = (event_ms // 3_600_000) % 24
            rows.append(row)
            key = (str(datacenter), event_ms - event_ms % window_ms)
            counts = windows.get(key)
            if counts is None:
                counts = windows[key] = [0, 0]
                window_ids[key] = []
                latencies[key] = LatencyBuckets()
            latencies[key].add(now_s - event_ms / 1000)
            counts[0] += 1
            counts[1] += len(value)
            event_id = header.get("eventId") if isinstance(header, dict) else None
            if isinstance(event_id, str) and len(event_id) == 36:
                window_ids[key].append(event_id)
            self.bytes += len(value)
        self.rows += len(rows)
        return rows

    def stats(self, started: float) -> RangeStats:
        return {"rows": self.rows, "bytes": self.bytes, "started": started, "host": socket.gethostname(),
                "windows": [[dc, start, c, b, _sketch_text(self.window_ids.get((dc, start))),
                             self.window_latency[(dc, start)].to_text()]
                            for (dc, start), (c, b) in sorted(self.windows.items())],
                "skipped": [list(s) for s in self.skipped]}


def _sketch_text(ids: list[str] | None) -> str | None:
    """The audit sketch of a window's event ids, base64 (it travels in Spark's accumulator and the manifest)."""
    if not ids:
        return None
    sketch = EventSketch()
    sketch.add(ids)
    return base64.b64encode(sketch.to_bytes()).decode()


def load_ranges(context: TaskContext, window_ms: int, accumulator: Any, target: pa.Schema,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: for each (index, partition, start, end) row, the range's Arrow batches, cast
    to ``target`` (Spark's Arrow form of the table's schema)."""
    started = time.time()
    decoder = _Decoder(context)
    arrow_schema = table_arrow_schema(json.loads(context.reader_schema))
    for batch in batches:
        for item in batch.to_pylist():
            loader = _RangeLoader(context, decoder, arrow_schema, window_ms, item["partition"], item["start"],
                                  item["end"])
            for loaded in loader.batches():
                yield loaded.cast(target)
                pause_at("loading")
            accumulator.add({item["index"]: loader.stats(started)})
