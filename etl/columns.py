"""A fetch's records into one Arrow batch column by column, and what the audit counts them under per window.

The task's per-row work is only the Avro decode into a dict and a few list appends: the event's fields become
Arrow columns in one ``from_pylist``, the lineage columns come from plain lists, and the event time, datacenter
and event id the audit needs are read from the decoded ``header`` column; date, hour, window and latency bucket
are computed on whole arrays. The values are exactly those of :class:`etl.task.RowBuilder` (its row dicts and
marks): where this path cannot be sure of that -- a header of another shape, events the fault injection drops, an
event time outside the calendar, a value Arrow refuses -- :func:`fetch_columns` answers None and the task takes
the row path for that fetch.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.quarantine import BadRecord
from pipeline.auditing.latency import BUCKETS, LatencyBuckets
from pipeline.lineage import CLUSTER_HEADER, OFFSET_HEADER, PARTITION_HEADER, lineage_of

__all__ = ["FetchColumns", "WindowCounts", "day_text", "fetch_columns", "header_columns_fit"]

_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_DAY_MS = 86_400_000
_HOUR_MS = 3_600_000
#: What Arrow raises for values it cannot put in the table's columns.
_UNCONVERTIBLE = (pa.ArrowException, ValueError, TypeError, OverflowError)
_BOUNDS = np.array(BUCKETS)


def day_text(ms: int, cache: dict[int, str]) -> str:
    """The UTC date of ``ms`` (milliseconds since the epoch) as YYYY-MM-DD; ValueError or OverflowError outside
    the calendar. ``cache`` keeps the text of each day seen."""
    days = ms // _DAY_MS
    text = cache.get(days)
    if text is None:
        text = cache[days] = datetime.date.fromordinal(_EPOCH_ORDINAL + days).isoformat()
    return text


def header_columns_fit(event_schema: pa.Schema) -> bool:
    """Whether the audit's fields can be read from the decoded header column as the row path reads them from
    the dicts: no ``header`` field, or a struct whose eventTime (if any) is an integer or a timestamp and whose
    eventId and datacenter (if any) are strings."""
    index = event_schema.get_field_index("header")
    if index < 0:
        return True
    header = event_schema.field(index).type
    if not pa.types.is_struct(header):
        return False
    kinds = {header.field(i).name: header.field(i).type for i in range(header.num_fields)}
    time = kinds.get("eventTime")
    if time is not None and not (pa.types.is_integer(time) or pa.types.is_timestamp(time)):
        return False
    return all(kinds.get(name, pa.string()) == pa.string() for name in ("eventId", "datacenter"))


@dataclass
class WindowCounts:
    """What one fetch loaded under one (datacenter, window start): rows, message bytes, event ids, latencies."""

    rows: int = 0
    bytes: int = 0
    ids: list[str] = field(default_factory=list)
    latency: LatencyBuckets = field(default_factory=LatencyBuckets)


@dataclass
class FetchColumns:
    """One fetch loaded: its batch (None if no record made a row), its counts per (datacenter, window start),
    and the records that could not be rows (with why)."""

    batch: pa.RecordBatch | None
    windows: dict[tuple[str, int], WindowCounts]
    bad: list[tuple[Any, BadRecord]]


def fetch_columns(records: Iterable[Any], start: int, end: int, topic: str, partition: int,
                  decode: Callable[[bytes | None], dict[str, Any]], event_schema: pa.Schema,
                  arrow_schema: pa.Schema, target: pa.Schema, window_ms: int, now_s: float,
                  days: dict[int, str]) -> FetchColumns | None:
    """The records of one fetch with offsets in [start, end) as one batch of ``target``; None when the row path
    must load them instead (see the module's text). ``event_schema`` (the event's raw columns) must satisfy
    :func:`header_columns_fit`."""
    events: list[dict[str, Any]] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    sizes: list[int] = []
    clusters: list[str | None] = []
    source_partitions: list[int | None] = []
    source_offsets: list[int | None] = []
    bad: list[tuple[Any, BadRecord]] = []
    for record in records:
        offset = record.offset
        if offset < start:
            continue
        if offset >= end:
            break
        value = record.value
        try:
            events.append(decode(value))
        except BadRecord as error:
            bad.append((record, error))
            continue
        offsets.append(offset)
        timestamps.append(record.timestamp)
        sizes.append(len(value))
        headers = record.headers
        source = _source(topic, headers) if headers else None
        if source is None:
            clusters.append(None)
            source_partitions.append(None)
            source_offsets.append(None)
        else:
            clusters.append(source[0])
            source_partitions.append(source[1])
            source_offsets.append(source[2])
    if not events:
        return FetchColumns(None, {}, bad)
    try:
        event = pa.RecordBatch.from_pylist(events, schema=event_schema)
    except _UNCONVERTIBLE:
        return None
    count = len(events)
    kafka_ms = np.array(timestamps, dtype=np.int64)
    event_ms, datacenters, ids = _header(event, kafka_ms)
    day_numbers, day_index = np.unique(event_ms // _DAY_MS, return_inverse=True)
    try:
        texts = [day_text(int(d) * _DAY_MS, days) for d in day_numbers.tolist()]
    except (ValueError, OverflowError):
        return None
    dates = pa.array(texts, pa.string()).take(pa.array(day_index.ravel()))
    added = [pa.array([topic] * count, pa.string()), pa.array([partition] * count, pa.int32()),
             pa.array(offsets, pa.int64()), pa.array(timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
             pa.array(clusters, pa.string()), pa.array(source_partitions, pa.int32()),
             pa.array(source_offsets, pa.int64()), dates, pa.array((event_ms // _HOUR_MS) % 24, pa.int32())]
    try:
        batch = pa.RecordBatch.from_arrays([*event.columns, *added], schema=arrow_schema).cast(target)
    except _UNCONVERTIBLE:
        return None
    return FetchColumns(batch, _windows(event_ms, datacenters, ids, np.array(sizes, dtype=np.int64), window_ms,
                                        now_s), bad)


def _source(topic: str, headers: Any) -> tuple[str, int, int] | None:
    """The lineage ``pipeline.lineage.lineage_of`` reads from ``headers``, read directly when they end with the
    three headers the mirror appends (then those are the last of their names, the ones it reads)."""
    if len(headers) >= 3:
        (cluster_name, cluster), (partition_name, partition), (offset_name, offset) = headers[-3:]
        if cluster_name == CLUSTER_HEADER and partition_name == PARTITION_HEADER and offset_name == OFFSET_HEADER \
                and cluster is not None and partition is not None and offset is not None:
            try:
                return cluster.decode(), int(partition), int(offset)
            except (UnicodeDecodeError, ValueError):
                return None
    lineage = lineage_of(topic, headers)
    return None if lineage is None else (lineage.cluster, lineage.partition, lineage.offset)


def _header(event: pa.RecordBatch, kafka_ms: np.ndarray) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """Per row: the event time (ms; the Kafka timestamp where the header has none), the datacenter as the row
    path's ``str(header.get("datacenter", ""))`` and the event id if it is a 36-character string (else null)."""
    count = len(kafka_ms)
    index = event.schema.get_field_index("header")
    if index < 0:
        return kafka_ms, pa.array([""] * count, pa.string()), pa.nulls(count, pa.string())
    header = event.column(index)
    names = [header.type.field(i).name for i in range(header.type.num_fields)]
    fields = dict(zip(names, header.flatten()))
    present = header.is_valid()
    time = fields.get("eventTime")
    if time is None:
        event_ms = kafka_ms
    else:
        raw = time.cast(pa.int64())  # a timestamp's raw value, as fastavro decoded it without its logical type
        event_ms = np.where(raw.is_valid().to_numpy(zero_copy_only=False),
                            raw.fill_null(0).to_numpy(zero_copy_only=False), kafka_ms)
    datacenter = fields.get("datacenter")
    if datacenter is None:
        datacenters = pa.array([""] * count, pa.string())
    else:
        datacenters = pc.if_else(present, datacenter.fill_null("None"), "")
    event_id = fields.get("eventId")
    if event_id is None:
        ids = pa.nulls(count, pa.string())
    else:
        ids = pc.if_else(pc.equal(pc.utf8_length(event_id), 36), event_id, None)
    return event_ms.astype(np.int64), datacenters, ids


def _windows(event_ms: np.ndarray, datacenters: pa.Array, ids: pa.Array, sizes: np.ndarray,
             window_ms: int, now_s: float) -> dict[tuple[str, int], WindowCounts]:
    """Rows, bytes, event ids and latency buckets per (datacenter, window start), rows in fetch order."""
    encoded = datacenters.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    window_numbers = event_ms // window_ms
    keys, group = np.unique(window_numbers * len(names) + encoded.indices.to_numpy(zero_copy_only=False),
                            return_inverse=True)
    group = group.ravel()
    seconds = np.maximum(0.0, now_s - event_ms / 1000)
    buckets = np.searchsorted(_BOUNDS, seconds, side="left")
    windows = {}
    for g, key in enumerate(keys.tolist()):
        if len(keys) == 1:
            rows, chosen = slice(None), ids
        else:
            mask = group == g
            rows, chosen = mask, ids.filter(pa.array(mask))
        counts = WindowCounts(len(event_ms[rows]), int(sizes[rows].sum()), chosen.drop_null().to_pylist(),
                              LatencyBuckets(np.bincount(buckets[rows], minlength=len(BUCKETS) + 1).tolist(),
                                             float(sum(seconds[rows].tolist()))))
        window_number, code = divmod(key, len(names))
        windows[(names[code], window_number * window_ms)] = counts
    return windows
