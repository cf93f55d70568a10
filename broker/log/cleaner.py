"""One pass of the log cleaner over a compacted log (Kafka's Cleaner), wherever it runs: in a cleaner
worker process (see cleaner_worker) or, for tests and tools, in the caller's thread.

A pass builds a key -> last offset map over the log's dirty section (a SkimpyOffsetMap of bounded size:
when it fills, the pass stops there and the rest waits for a later pass), and rewrites the log from its
start up to where the map ends, keeping of every key only its latest record. Tombstones (a null value)
are kept until delete.retention.ms after the segment holding them was cleaned (the first cleaning of a
tombstone keeps it and sets its segment's modification time; a merged segment takes the latest time of
the segments it replaces), so a consumer reading from the start within that time sees them; small
adjacent segments are merged. Each group of segments is written as one ``<base>.log.cleaned`` segment,
which the pass's CleaningTarget swaps in (Log.replace_segments).

Batches keep their base offset, last offset delta, leader epoch, producer id, epoch and base sequence
(so offsets keep gaps, never move); a compressed batch is recompressed with its codec; a batch whose
records are all gone is dropped, except the last batch of a live idempotent producer, kept empty so
that its sequence state survives (Kafka's rule). The active segment and records newer than
min.compaction.lag.ms or at or above the last stable offset are never cleaned.

Transactions (see cleaned_transactions): the records of aborted transactions are dropped and never
enter the offset map; a commit or abort marker stays while data of its transaction remains, the
cleaned segment's .txnindex keeping the aborted ones; a marker without data left goes like a tombstone,
once its segment's clock is delete.retention.ms old (dropping aborted data restarts that clock).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol

from broker.log.file_records import iter_file_batches
from broker.log.log import Log, now_ms
from broker.log.log_config import INT64_MAX, LogConfig
from broker.log.log_cleaner_manager import (
    LogCleanerManager,
    LogCleaningAbortedError,
    LogToClean,
    TopicPartition,
)
from broker.log.log_segment import CLEANED_SUFFIX, INT32_MAX, LogSegment
from broker.log.cleaned_transactions import CleanedTransactionMetadata
from broker.log.offset_map import SkimpyOffsetMap
from broker.log.transaction_index import AbortedTxn
from pipeline.durable_file import fsync_and_close
from pipeline.protocol import compression
from pipeline.records.batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    build_batch,
    parse_header,
)
from pipeline.records.control import parse_control_key
from pipeline.records.decode import record_spans
from pipeline.testing_faults import Faults


@dataclass
class CleanerConfig:
    """The log cleaner's broker settings (Kafka's CleanerConfig); comments name the properties."""

    threads: int = 1  # log.cleaner.threads
    dedupe_buffer_size: int = 134_217_728  # log.cleaner.dedupe.buffer.size (shared by the threads)
    io_buffer_size: int = 524_288  # log.cleaner.io.buffer.size
    max_io_bytes_per_second: float = math.inf  # log.cleaner.io.max.bytes.per.second
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    enable: bool = True  # log.cleaner.enable
    load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    faults: Faults = Faults()  # testing.pause.at and .file (tests only)

    @classmethod
    def from_properties(cls, config: Mapping[str, object]) -> "CleanerConfig":
        """From the broker's log.cleaner.* properties."""
        return cls(
            threads=int(config["log.cleaner.threads"]),  # type: ignore[arg-type]
            dedupe_buffer_size=int(config["log.cleaner.dedupe.buffer.size"]),  # type: ignore[arg-type]
            io_buffer_size=int(config["log.cleaner.io.buffer.size"]),  # type: ignore[arg-type]
            max_io_bytes_per_second=float(config["log.cleaner.io.max.bytes.per.second"]),  # type: ignore[arg-type]
            backoff_ms=int(config["log.cleaner.backoff.ms"]),  # type: ignore[arg-type]
            enable=bool(config["log.cleaner.enable"]),
            faults=Faults.of(config),
        )


@dataclass
class CleanerStats:
    """What one pass did (Kafka's CleanerStats)."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    # Tombstones of the dirty section kept by their first cleaning (their segment's clock restarts).
    first_cleaned_tombstones: int = 0
    buffer_utilization: float = 0.0
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0

    @property
    def elapsed_secs(self) -> float:
        return (self.ended or time.monotonic()) - self.started


class Throttler:
    """Holds a thread back to ``rate`` bytes per second on average (Kafka's Throttler)."""

    CHECK_INTERVAL = 0.1

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._period_start = clock()
        self._observed = 0

    def maybe_throttle(self, nbytes: int) -> None:
        """Count ``nbytes`` done; sleep when the rate since the last check is above ``rate``."""
        if math.isinf(self.rate):
            return
        self._observed += nbytes
        elapsed = self._clock() - self._period_start
        if elapsed < self.CHECK_INTERVAL:
            return
        wanted = self._observed / self.rate
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
        self._period_start = self._clock()
        self._observed = 0


def _last_modified_ms(fd: int) -> int:
    return os.fstat(fd).st_mtime_ns // 1_000_000


def encode_header(header: BatchHeader, attributes: int, max_timestamp: int, record_count: int, body: bytes) -> bytes:
    """A batch with ``header``'s offsets, leader epoch, producer fields and base timestamp around ``body``."""
    return build_batch(
        header.base_offset, header.partition_leader_epoch, attributes, header.last_offset_delta,
        header.base_timestamp, max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
        record_count, body,
    )


@dataclass(frozen=True)
class _PassBounds:
    """Where a pass's dirty section starts, where its offset map ends, and its tombstones' horizon."""

    first_dirty_offset: int
    end: int
    delete_horizon_ms: int


@dataclass(frozen=True)
class SegmentInfo:
    """What a pass needs to know of an inactive segment to read it and merge it with its neighbours."""

    base_offset: int
    next_offset: int
    size: int
    index_bytes: int
    time_index_bytes: int

    @classmethod
    def of(cls, segment: LogSegment) -> "SegmentInfo":
        return cls(segment.base_offset, segment.next_offset, segment.size, segment.index.size_in_bytes,
                   segment.time_index.size_in_bytes)


@dataclass(frozen=True)
class CleaningJob:
    """One pass over one log, as plain values (it crosses to a cleaner worker process): the log's
    directory and config, its dirty section, its inactive segments below the first uncleanable
    offset, the last data offset of every live producer (whose last batch is never dropped), and the
    aborted transactions below the first uncleanable offset."""

    topic_partition: TopicPartition
    dir: Path
    log_config: LogConfig
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: tuple[SegmentInfo, ...]
    producers: dict[int, int]
    aborted: tuple[AbortedTxn, ...] = ()

    @classmethod
    def of(cls, to_clean: LogToClean, segments: list[LogSegment] | None = None) -> "CleaningJob":
        """The job of ``to_clean`` over ``segments`` (by default the log's inactive segments below its first
        uncleanable offset now)."""
        log_ = to_clean.log
        if segments is None:
            segments = log_.segments_below(to_clean.first_uncleanable_offset)
        return cls(to_clean.topic_partition, log_.dir, log_.config, to_clean.first_dirty_offset,
                   to_clean.first_uncleanable_offset, tuple(SegmentInfo.of(s) for s in segments),
                   {pid: entry.last_data_offset for pid, entry in list(log_.producer_state.producers.items())},
                   tuple(log_.aborted_transactions(log_.log_start_offset, to_clean.first_uncleanable_offset)))


class CleaningTarget(Protocol):
    """Where a pass reads its segments and swaps its cleaned ones in: the Log itself (LocalTarget)
    or, from a cleaner worker process, the broker holding it."""

    def open_segment(self, segment: SegmentInfo) -> int:
        """A new descriptor of the segment's .log file; the pass closes it."""

    def check_aborted(self) -> None:
        """Raise LogCleaningAbortedError when the pass must stop."""

    def swap(self, cleaned: LogSegment, group: list[SegmentInfo]) -> bool:
        """Swap the complete, synced ``cleaned`` segment in for ``group``; False when the log moved
        under the pass (nothing changed). After True ``cleaned`` is no longer the pass's."""


class LocalTarget:
    """The Log of a pass run in the broker's own process (LogCleaner.clean_once)."""

    def __init__(self, log_: Log, manager: LogCleanerManager, topic_partition: TopicPartition,
                 faults: Faults = Faults()) -> None:
        self.log = log_
        self.manager = manager
        self.topic_partition = topic_partition
        self.faults = faults
        self._segments = {s.base_offset: s for s in log_.segments_below(INT64_MAX)}

    def open_segment(self, segment: SegmentInfo) -> int:
        found = self._segments.get(segment.base_offset)
        if found is None:
            raise LogCleaningAbortedError(f"segment {segment.base_offset} of {self.log.dir.name} left the log")
        return self.log.open_segment_for_reading(found)

    def check_aborted(self) -> None:
        self.manager.check_cleaning_aborted(self.topic_partition)

    def swap(self, cleaned: LogSegment, group: list[SegmentInfo]) -> bool:
        old = [self._segments.get(s.base_offset) for s in group]
        if any(s is None for s in old):
            return False
        return self.log.replace_segments(cleaned, old, self.faults.pause)  # type: ignore[arg-type]


class Cleaner:
    """One thread's or worker's cleaning machinery: its offset map, I/O throttler and buffer size
    (Kafka's Cleaner). A pass reads and writes files only; the target swaps its segments in."""

    def __init__(self, config: CleanerConfig, time_ms: Callable[[], int] = now_ms,
                 throttler: Throttler | None = None) -> None:
        self.config = config
        self.offset_map = SkimpyOffsetMap(max(1, config.dedupe_buffer_size // max(1, config.threads)))
        self.throttler = throttler or Throttler(config.max_io_bytes_per_second)
        self._time_ms = time_ms

    def clean(self, job: CleaningJob, target: CleaningTarget) -> tuple[int, CleanerStats]:
        """Clean the log from its start to as far as the offset map reaches into the dirty section;
        return where the next pass starts and what this one did. Raises LogCleaningAbortedError
        when the pass was aborted or the log moved under it (the segments swapped in so far stay)."""
        stats = CleanerStats()
        end = self.build_offset_map(job, target, stats)
        stats.buffer_utilization = self.offset_map.utilization
        # A tombstone is kept by its first cleaning, which sets its segment's modification time; it goes
        # once that time is delete.retention.ms ago (a merged segment takes its sources' latest time).
        delete_horizon_ms = self._time_ms() - job.log_config.delete_retention_ms
        bounds = _PassBounds(job.first_dirty_offset, end, delete_horizon_ms)
        below_end = [s for s in job.segments if s.base_offset < end]
        transactions = CleanedTransactionMetadata(job.aborted)
        for group in self.group_segments_by_size(below_end, job.log_config.segment_bytes,
                                                 job.log_config.max_index_size):
            self.clean_segments(job, target, group, bounds, stats, transactions)
        stats.ended = time.monotonic()
        return end, stats

    # ------------------------------------------------------------------------------- offset map

    def build_offset_map(self, job: CleaningJob, target: CleaningTarget, stats: CleanerStats) -> int:
        """Put the keys of the dirty section's records into the offset map until it is full; return
        the offset the map reaches (the first uncleanable offset when it holds the whole section)."""
        start, end = job.first_dirty_offset, job.first_uncleanable_offset
        offset_map = self.offset_map
        offset_map.clear()
        max_entries = int(offset_map.slots * self.config.load_factor)
        put = offset_map.put
        check_aborted = target.check_aborted
        transactions = CleanedTransactionMetadata(job.aborted)
        reached = start
        for segment in job.segments:
            if segment.next_offset <= start:
                continue
            if segment.base_offset >= end:
                break
            fd = target.open_segment(segment)
            try:
                for _, header, buf, off in iter_file_batches(fd, 0, segment.size, self.config.io_buffer_size, whole=True):
                    if header.next_offset <= start:
                        continue
                    if header.base_offset >= end:
                        return end
                    check_aborted()
                    if not header.attributes & CONTROL_FLAG and not (
                            header.producer_id >= 0 and transactions.on_batch_read(header)):
                        if offset_map.size + header.record_count > max_entries:
                            if offset_map.size == 0:
                                raise ValueError(f"a batch of {header.record_count} records does not fit the "
                                                 f"offset map of {max_entries} entries")
                            return reached
                        _, records = record_spans(buf, off, header)
                        for _, _, offset, _, key, _ in records:
                            if key is not None:
                                put(key, offset)
                        stats.map_messages_read += header.record_count
                    reached = header.next_offset
                    stats.map_bytes_read += header.size
                    self.throttler.maybe_throttle(header.size)
            finally:
                os.close(fd)
        return end

    # --------------------------------------------------------------------------------- rewrite

    @staticmethod
    def group_segments_by_size(segments: list[SegmentInfo], max_size: int, max_index_size: int) -> list[list[SegmentInfo]]:
        """Consecutive segments merged while the group stays within segment.bytes, the index size
        limit and 2^31-1 offsets (Kafka's groupSegmentsBySize)."""
        groups: list[list[SegmentInfo]] = []
        i = 0
        while i < len(segments):
            group = [segments[i]]
            size = segments[i].size
            index_size = segments[i].index_bytes
            time_index_size = segments[i].time_index_bytes
            i += 1
            while i < len(segments):
                nxt = segments[i]
                if (size + nxt.size > max_size
                        or index_size + nxt.index_bytes > max_index_size
                        or time_index_size + nxt.time_index_bytes > max_index_size
                        or nxt.next_offset - 1 - group[0].base_offset > INT32_MAX):
                    break
                group.append(nxt)
                size += nxt.size
                index_size += nxt.index_bytes
                time_index_size += nxt.time_index_bytes
                i += 1
            groups.append(group)
        return groups

    def clean_segments(self, job: CleaningJob, target: CleaningTarget, group: list[SegmentInfo],
                       bounds: _PassBounds, stats: CleanerStats,
                       transactions: CleanedTransactionMetadata | None = None) -> None:
        """Write the records of ``group`` to keep into one .cleaned segment and swap it in; ``transactions``
        follows the pass's transactions from the log start (a fresh one reads the group alone)."""
        base = group[0].base_offset
        cleaned = LogSegment(job.dir, base, job.log_config, self._time_ms(), suffix=CLEANED_SUFFIX)
        if transactions is None:
            transactions = CleanedTransactionMetadata(job.aborted)
        transactions.txn_index = cleaned.txn_index
        cleaned.txn_index.reset()  # left by an earlier pass that failed, or none
        swapped = False
        try:
            if cleaned.size:  # left by an earlier pass that failed
                cleaned.truncate_to(0)
                cleaned.index.reset()
                cleaned.time_index.reset()
            pending = bytearray()
            entries: list[tuple[int, int, int, int, int]] = []
            last_modified = 0
            first_cleaned_tombstones = stats.first_cleaned_tombstones
            for segment in group:
                fd = target.open_segment(segment)
                try:
                    modified = _last_modified_ms(fd)
                    last_modified = max(last_modified, modified)
                    retain_deletes = modified > bounds.delete_horizon_ms
                    for _, header, buf, off in iter_file_batches(fd, 0, segment.size, self.config.io_buffer_size, whole=True):
                        target.check_aborted()
                        kept = self.filter_batch(buf, off, header, bounds, retain_deletes, job.producers, stats,
                                                 transactions)
                        stats.bytes_read += header.size
                        self.throttler.maybe_throttle(header.size)
                        if kept is None:
                            continue
                        kept_header = parse_header(kept)
                        entries.append((len(pending), header.base_offset, header.next_offset,
                                        kept_header.max_timestamp, len(kept)))
                        pending += kept
                        if len(pending) >= self.config.io_buffer_size:
                            self._write(cleaned, pending, entries, stats)
                finally:
                    os.close(fd)
            if pending:
                self._write(cleaned, pending, entries, stats)
            cleaned.on_become_inactive()
            fsync_and_close(cleaned.open_for_sync())
            if stats.first_cleaned_tombstones > first_cleaned_tombstones:
                last_modified = self._time_ms()
            cleaned.set_last_modified_ms(last_modified)
            self.config.faults.pause("before-swap")
            swapped = target.swap(cleaned, group)
            if not swapped:
                raise LogCleaningAbortedError(f"{job.dir.name} changed during its cleaning")
        finally:
            if not swapped:
                cleaned.close()
                for path in cleaned.paths():
                    path.unlink(missing_ok=True)

    def _write(self, cleaned: LogSegment, pending: bytearray, entries: list, stats: CleanerStats) -> None:
        first = cleaned.size == 0
        cleaned.append(pending, entries)
        stats.bytes_written += len(pending)
        self.throttler.maybe_throttle(len(pending))
        pending.clear()
        entries.clear()
        if first:
            self.config.faults.pause("writing-cleaned")

    def filter_batch(self, buf: bytes, off: int, header: BatchHeader, bounds: _PassBounds, retain_deletes: bool,
                     producers: dict[int, int], stats: CleanerStats,
                     transactions: CleanedTransactionMetadata | None = None) -> bytes | None:
        """The batch with only the records to keep (itself when all are kept), an empty batch for a
        live idempotent producer's last batch, or None (Kafka's MemoryRecords.filterTo).

        A record is kept when it is its key's latest and not in an aborted transaction, and for a
        tombstone, when it is cleaned for the first time (in the dirty section) or ``retain_deletes``.
        A transaction marker is kept while its transaction has data, then as a tombstone is. Records
        from ``bounds.end`` on, where the offset map stops, are all kept."""
        stats.messages_read += header.record_count
        if header.attributes & CONTROL_FLAG:
            if transactions is not None and header.producer_id >= 0:
                _, records = record_spans(buf, off, header)
                key = records[0][4] if records else None
                kind = parse_control_key(key) if key is not None and len(key) >= 4 else -1
                if transactions.on_control_batch_read(header, kind) and not retain_deletes:
                    return None
            stats.messages_written += header.record_count
            return buf[off : off + header.size]
        if transactions is not None and header.producer_id >= 0 and transactions.on_batch_read(header):
            # An aborted transaction's records: gone, and the segment's tombstone clock restarts for its marker.
            if header.record_count:
                stats.first_cleaned_tombstones += 1
            if producers.get(header.producer_id) == header.last_offset:
                return encode_header(header, header.attributes & ~COMPRESSION_MASK, header.max_timestamp, 0, b"")
            return None
        get = self.offset_map.get
        data, records = record_spans(buf, off, header)
        end = bounds.end
        dirty_start = bounds.first_dirty_offset
        kept = []
        for record in records:
            _, _, offset, _, key, has_value = record
            if offset >= end:
                kept.append(record)
            elif key is None:
                stats.invalid_messages += 1
            elif offset >= get(key):
                if has_value or retain_deletes:
                    kept.append(record)
                elif offset >= dirty_start:
                    kept.append(record)
                    stats.first_cleaned_tombstones += 1
        stats.messages_written += len(kept)
        if len(kept) == len(records):
            return buf[off : off + header.size]
        attributes = header.attributes
        if not kept:
            if header.producer_id >= 0 and producers.get(header.producer_id) == header.last_offset:
                return encode_header(header, attributes & ~COMPRESSION_MASK, header.max_timestamp, 0, b"")
            return None
        body = b"".join([data[start:end] for start, end, _, _, _, _ in kept])
        codec = attributes & COMPRESSION_MASK
        if codec:
            body = compression.compress(codec, body)
        if attributes & TIMESTAMP_TYPE_MASK:
            max_timestamp = header.max_timestamp
        else:
            max_timestamp = header.base_timestamp + max(ts_delta for _, _, _, ts_delta, _, _ in kept)
        return encode_header(header, attributes, max_timestamp, len(kept), body)
