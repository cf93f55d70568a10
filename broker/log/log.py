"""One partition's log: an ordered list of segments with append, read by offset, roll, retention,
recovery and flush (Kafka's UnifiedLog / Log)."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import uuid
from bisect import bisect_left, bisect_right
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from pipeline.durable_file import fsync_and_close, fsync_dir
from broker.log.errors import KafkaStorageError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from broker.log.fetch_slice import FetchSlice
from broker.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry, LeaderEpochFileCache
from broker.log.log_config import LogConfig
from broker.log.log_segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
)
from broker.log.log_validator import validate_client_batch, validate_replicated_batches
from broker.log.producer_state import ProducerStateManager
from broker.log.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from pipeline.records import decode_batch
from pipeline.records.batch import (
    CONTROL_FLAG,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CorruptBatchError,
    patch_base_offset,
    patch_leader_epoch,
)
from pipeline.records.control import end_transaction_marker_batch, parse_end_transaction_marker

DELETED_DIR_SUFFIX = "-delete"
_SEGMENT_FILE = re.compile(r"([0-9]{20})(\.log|\.index|\.timeindex|\.txnindex)")
_TOPIC_PARTITION = re.compile(r"(.+)-([0-9]+)")


def now_ms() -> int:
    """Wall-clock time in milliseconds."""
    return time.time_ns() // 1_000_000


def parse_topic_partition(dir_name: str) -> tuple[str, int] | None:
    """(topic, partition) from a ``<topic>-<partition>`` directory name, or None."""
    match = _TOPIC_PARTITION.fullmatch(dir_name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


class AppendInfo(NamedTuple):
    """What an append did: the offsets it assigned (or, for a duplicate, the original ones)."""

    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool
    # Set when the append must be synced before it is acknowledged (log.flush.interval.messages reached):
    # done once an fsync covering it has finished, or failed with that fsync's error.
    sync: Future | None = None


class Log:
    """The log of one topic partition: segments ``<base offset>.log`` in ``<log.dir>/<topic>-<partition>``.

    Offsets are logical and contiguous. In memory the log keeps the sorted segment base offsets and
    a few values per segment; batch positions are found through the on-disk indexes. Every public
    method is safe to call from several threads.

    With an ``executor`` (the broker's scheduler pool) the log never fsyncs or removes files in the
    caller's thread: flushes an append asks for are group commits run on the pool, a rolled segment is
    flushed there, and a deleted log's directory is removed there. Without one, it does so inline.
    """

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        last_shutdown_clean: bool = False,
        time_ms: Callable[[], int] = now_ms,
        executor: Executor | None = None,
        on_flush: Callable[[float], None] | None = None,
        on_truncated: Callable[["Log"], None] | None = None,
    ) -> None:
        """``on_flush`` is told the seconds each flush that synced something took (any thread);
        ``on_truncated`` is called (without the log's lock) after a truncation lowered the recovery
        point, so that the owner can checkpoint it before new data is appended above it."""
        parsed = parse_topic_partition(dir.name)
        if parsed is None:
            raise ValueError(f"log directory name {dir.name!r} is not <topic>-<partition>")
        self.topic, self.partition = parsed
        self.dir = dir
        self.config = config
        self._time_ms = time_ms
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.producer_state = ProducerStateManager(dir)
        self.leader_epoch_cache: LeaderEpochFileCache
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.recovery_point = recovery_point
        self._on_truncated = on_truncated
        # Bumped by every truncation, so that a flush that began before one does not move the
        # recovery point over data appended after it.
        self._truncations = 0
        self.last_flush_ms = time_ms()
        self._unflushed_messages = 0
        self._pending_deletes: list[tuple[int, list[Path]]] = []
        self._dir_dirty = False
        # The parent directory must be synced for a newly created partition directory to survive a crash.
        self._parent_dir_dirty = not dir.exists()
        self._executor = executor
        self._on_flush = on_flush
        self._unsynced_files: list[Path] = []
        self._sync_waiters: list[Future] = []
        self._sync_running = False
        self._flush_lock = threading.Lock()
        self._closed = False
        dir.mkdir(parents=True, exist_ok=True)
        self._load(recovery_point, last_shutdown_clean)
        if self._parent_dir_dirty and not self._in_background(self.flush, 0):
            self.flush(0)

    # ------------------------------------------------------------------------------------- load

    def _load(self, recovery_point: int, last_shutdown_clean: bool) -> None:
        self._recover_interrupted_swaps()
        names = os.listdir(self.dir)
        bases: list[int] = []
        index_files: list[tuple[int, str]] = []
        for name in names:
            if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
                (self.dir / name).unlink(missing_ok=True)
                continue
            match = _SEGMENT_FILE.fullmatch(name)
            if match is None:
                continue
            if match.group(2) == LOG_SUFFIX:
                bases.append(int(match.group(1)))
            else:
                index_files.append((int(match.group(1)), name))
        base_set = set(bases)
        for base, name in index_files:
            if base not in base_set:
                (self.dir / name).unlink(missing_ok=True)
        bases.sort()
        if not bases:
            bases = [0]
            self._dir_dirty = True
        now = self._time_ms()
        segments = [LogSegment(self.dir, base, self.config, now, hold_indexes=False) for base in bases]
        recover_from = len(segments) if last_shutdown_clean else max(0, bisect_right(bases, recovery_point) - 1)

        i = 0
        while i < len(segments):
            segment = segments[i]
            segment.hold_indexes()
            if i >= recover_from:
                truncated = segment.recover()
                overlaps_next = i + 1 < len(segments) and segment.next_offset > segments[i + 1].base_offset
                if truncated or overlaps_next:
                    for doomed in segments[i + 1 :]:
                        doomed.close()
                        for path in doomed.paths():
                            path.unlink(missing_ok=True)
                    del segments[i + 1 :]
            elif segment.indexes_need_rebuild() or not segment.load_tail():
                if not segment.rebuild_indexes():
                    recover_from = i
                    continue
            if i + 1 < len(segments):
                segment.on_become_inactive()
            i += 1

        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self.log_start_offset = segments[0].base_offset
        self.log_end_offset = segments[-1].next_offset
        if last_shutdown_clean:
            self.recovery_point = self.log_end_offset
        else:
            self.recovery_point = max(self.log_start_offset, min(recovery_point, self.log_end_offset))
        # The aborted-transaction indexes of recovered segments, and damaged ones, are rebuilt by the scan.
        rebuild = {segment.base_offset for i, segment in enumerate(segments)
                   if i >= recover_from or not segment.txn_index.is_consistent()}
        for segment in segments:
            if segment.base_offset in rebuild:
                segment.txn_index.reset()
        self._load_producer_state(rebuild)
        self._load_leader_epoch_cache()

    def _recover_interrupted_swaps(self) -> None:
        """Finish or undo a cleaner's segment replacement cut short by a crash (Kafka's rules).

        A .cleaned file is an incomplete replacement: deleted, and so is every .swap file at or above
        the lowest cleaned base offset (its group's renames were not all done). A .swap segment is
        complete: the segments whose base offsets lie in its offset range are deleted and it takes its
        final name. The old segments are renamed away before any .swap file takes its final name, so
        a .swap index file without its .swap log belongs to a final .log and is removed (rebuilt)."""
        names = os.listdir(self.dir)
        cleaned_bases = [int(name[:20]) for name in names if name.endswith(CLEANED_SUFFIX)]
        min_cleaned = min(cleaned_bases, default=None)
        swap_logs: list[int] = []
        for name in names:
            path = self.dir / name
            if name.endswith(CLEANED_SUFFIX):
                path.unlink(missing_ok=True)
            elif name.endswith(SWAP_SUFFIX):
                base = int(name[:20])
                if min_cleaned is not None and base >= min_cleaned:
                    path.unlink(missing_ok=True)
                elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                    swap_logs.append(base)
                elif f"{name[:20]}{LOG_SUFFIX}{SWAP_SUFFIX}" not in names:
                    if name.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX) and f"{name[:20]}{LOG_SUFFIX}" in names:
                        # Its .log took the final name first; unlike the other indexes it cannot be rebuilt.
                        os.rename(path, path.with_name(name[: -len(SWAP_SUFFIX)]))
                    else:
                        path.unlink(missing_ok=True)
        for base in sorted(swap_logs):
            swap = LogSegment(self.dir, base, self.config, self._time_ms(), suffix=SWAP_SUFFIX)
            swap.recover()
            end = swap.next_offset
            for name in os.listdir(self.dir):
                match = _SEGMENT_FILE.fullmatch(name)
                if match is not None and base <= int(match.group(1)) < max(end, base + 1):
                    (self.dir / name).unlink(missing_ok=True)
            swap.on_become_inactive()
            swap.change_suffix(SWAP_SUFFIX, "")
            swap.close()
        if cleaned_bases or swap_logs:
            fsync_dir(self.dir)

    def _load_leader_epoch_cache(self) -> None:
        """Load the leader-epoch-checkpoint (rebuilt from the batch headers when missing, as for a
        log written before leader epochs) and fit it to the recovered log."""
        cache = LeaderEpochFileCache(self.dir / LEADER_EPOCH_CHECKPOINT_FILE)
        if not cache.loaded and self.log_end_offset > self.log_start_offset:
            entries: list[EpochEntry] = []
            latest = -1
            for segment in self._segments:
                for _, h in segment.iter_headers():
                    if h.partition_leader_epoch > latest:
                        latest = h.partition_leader_epoch
                        entries.append(EpochEntry(latest, h.base_offset))
            cache.replace(entries)
        cache.truncate_from_end(self.log_end_offset)
        cache.truncate_from_start(self.log_start_offset)
        self.leader_epoch_cache = cache

    def _load_producer_state(self, rebuild_txn_indexes: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        """Load the newest snapshot and replay the batches after it; the aborted transactions found
        in the segments whose base offsets are in ``rebuild_txn_indexes`` are written to their
        (emptied) txn indexes, so the scan starts at the first of them at the latest."""
        state = self.producer_state
        first_rebuilt = min(rebuild_txn_indexes, default=None)
        snapshot = state.load_latest_snapshot(self.log_end_offset, first_rebuilt)
        if snapshot is None or snapshot < self.log_start_offset:
            state.clear()
            snapshot = self.log_start_offset
        for segment in self._segments:
            if segment.next_offset <= snapshot:
                continue
            index = segment.txn_index if segment.base_offset in rebuild_txn_indexes else None
            position = segment.index.lookup(snapshot)[1]
            for batch_position, h in segment.iter_headers(position):
                if h.base_offset + h.last_offset_delta < snapshot:
                    continue
                if h.producer_id >= 0:
                    self._replay_batch(h, lambda: os.pread(segment.fd, h.size, batch_position), index)
        state.truncate_head(self.log_start_offset)
        state.on_high_watermark(self.high_watermark)

    def _replay_batch(self, h: BatchHeader, read: Callable[[], bytes | bytearray | memoryview],
                      txn_index: TransactionIndex | None) -> None:
        """Apply one batch of a producer (id >= 0) to the producer state: data extends its sequence and
        transaction, a marker (whose record ``read`` returns the batch for) ends the transaction, an
        aborted one indexed in ``txn_index`` (a TransactionIndex, None to leave the index alone)."""
        state = self.producer_state
        if not h.attributes & CONTROL_FLAG:
            if h.base_sequence >= 0:
                state.replay(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, h.base_offset,
                             h.last_offset, bool(h.attributes & TRANSACTIONAL_FLAG))
            return
        try:
            records = decode_batch(read(), check_crc=False)[1]
            marker = parse_end_transaction_marker(records[0].key, records[0].value) if records else None
        except (CorruptBatchError, ValueError) as exc:
            raise CorruptRecordError(f"{self.dir.name}: control batch at offset {h.base_offset}: {exc}") from None
        if marker is None:
            return
        txn = state.complete_txn(h.producer_id, h.producer_epoch, marker.coordinator_epoch, marker.committed,
                                 h.base_offset)
        if txn is not None and txn.is_aborted and txn_index is not None:
            txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                        state.last_stable_offset_after(txn)))

    # ----------------------------------------------------------------------------------- append

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int = -1) -> AppendInfo:
        """Validate, assign offsets to and append one whole RecordBatch v2 batch from a client.

        As Kafka does for Produce v3+, the records must be exactly one batch; a batch Kafka refuses
        from clients (see log_validator.validate_client_batch) raises before the log is touched. A retried
        duplicate from an idempotent producer is not written; its original offsets come back with
        duplicate=True.
        """
        buf = bytearray(records)
        batches = [validate_client_batch(buf, self.config.max_message_bytes, require_keys=self.config.compact)]

        flush_after = False
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir.name} is closed")
            first_offset = offset = self.log_end_offset
            staged = None
            entries = []
            append_max_ts = -1
            for pos, size, last_delta, max_ts, pid, epoch, seq, attributes in batches:
                next_offset = offset + last_delta + 1
                if pid >= 0 and seq >= 0 and not attributes & CONTROL_FLAG:
                    if staged is None:
                        staged = {}
                    last_seq = (seq + last_delta) & 0x7FFFFFFF
                    duplicate = self.producer_state.check(pid, epoch, seq, last_seq, offset, next_offset - 1, staged,
                                                          bool(attributes & TRANSACTIONAL_FLAG))
                    if duplicate is not None:
                        return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1, self.log_start_offset, True)
                entries.append((pos, offset, next_offset, max_ts, size))
                if max_ts > append_max_ts:
                    append_max_ts = max_ts
                offset = next_offset

            for pos, base, _, _, _ in entries:
                patch_base_offset(buf, pos, base)
                patch_leader_epoch(buf, pos, leader_epoch)
            flush_after = self._append_locked(buf, entries, append_max_ts)
            if leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first_offset)
            if staged:
                self.producer_state.commit(staged)
            info = AppendInfo(first_offset, offset - 1, -1, self.log_start_offset, False)
        if flush_after:
            info = info._replace(sync=self.sync())
        return info

    def append_control_marker(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                              leader_epoch: int = -1) -> AppendInfo:
        """Append the commit (or abort) marker of ``producer_id``'s transaction as leader (WriteTxnMarkers).

        Raises InvalidProducerEpochError for an epoch older than the producer's and
        TransactionCoordinatorFencedError for an older coordinator epoch. The transaction, if it had
        data here, stops holding the last stable offset once the high watermark passes the marker; an
        aborted one is written to the active segment's txn index."""
        flush_after = False
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir.name} is closed")
            state = self.producer_state
            state.check_marker(producer_id, producer_epoch, coordinator_epoch)
            offset = self.log_end_offset
            now = self._time_ms()
            buf = bytearray(end_transaction_marker_batch(producer_id, producer_epoch, committed, coordinator_epoch,
                                                         now, base_offset=offset, partition_leader_epoch=leader_epoch))
            flush_after = self._append_locked(buf, [(0, offset, offset + 1, now, len(buf))], now)
            if leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, offset)
            txn = state.complete_txn(producer_id, producer_epoch, coordinator_epoch, committed, offset)
            if txn is not None and txn.is_aborted:
                self._segments[-1].txn_index.append(AbortedTxn(producer_id, txn.first_offset, offset,
                                                               state.last_stable_offset_after(txn)))
            info = AppendInfo(offset, offset, -1, self.log_start_offset, False)
        if flush_after:
            info = info._replace(sync=self.sync())
        return info

    def _append_locked(self, buf: bytearray, entries: list[tuple[int, int, int, int, int]], max_ts: int) -> bool:
        """Write whole batches with their offsets set (rolling first if needed), advance the log end
        offset; return whether log.flush.interval.messages asks for a sync. The lock is held."""
        first_offset = self.log_end_offset
        end = entries[-1][2]
        segment = self._segments[-1]
        if segment.should_roll(self.config, len(buf), max_ts, end - 1, self._time_ms()):
            segment = self._roll_locked()
        segment.append(buf, entries)
        self.log_end_offset = end
        interval = self.config.flush_interval_messages
        if interval is None:
            return False
        self._unflushed_messages += end - first_offset
        return self._unflushed_messages >= interval

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo | None:
        """Append the whole batches of a fetch from the leader as the leader wrote them (offsets and
        leader epochs kept); a trailing partial batch is left out. None when there is no whole batch.

        Each batch is checked for framing, magic and CRC, the offsets must be contiguous from the log
        end offset (else UnexpectedAppendOffsetError), and nothing is written unless all are good.
        The idempotent producers' state and the leader epoch cache follow the batches.
        """
        buf = bytearray(records)
        batches = validate_replicated_batches(buf, self.config.max_message_bytes)
        if not batches:
            return None
        pos, size, _ = batches[-1]
        del buf[pos + size :]

        flush_after = False
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir.name} is closed")
            first_offset = offset = self.log_end_offset
            entries = []
            append_max_ts = -1
            for pos, size, h in batches:
                # Forward gaps are the leader's compaction: only an offset going back is refused.
                if h.base_offset < offset:
                    raise UnexpectedAppendOffsetError(
                        f"{self.dir.name}: a follower batch starts at offset {h.base_offset}, below {offset}"
                    )
                offset = h.base_offset + h.last_offset_delta + 1
                entries.append((pos, h.base_offset, offset, h.max_timestamp, size))
                if h.max_timestamp > append_max_ts:
                    append_max_ts = h.max_timestamp
            flush_after = self._append_locked(buf, entries, append_max_ts)
            self._replay_headers(buf, batches)
            info = AppendInfo(first_offset, offset - 1, -1, self.log_start_offset, False)
        if flush_after:
            info = info._replace(sync=self.sync())
        return info

    def _replay_headers(self, buf: bytearray, batches: Iterable[tuple[int, int, BatchHeader]]) -> None:
        """Apply batches a leader wrote (at ``(position, size)`` in ``buf``, just appended to the active
        segment) to the producer state, the txn index and the leader epoch cache, as the leader did."""
        cache = self.leader_epoch_cache
        txn_index = self._segments[-1].txn_index
        for pos, size, h in batches:
            if h.producer_id >= 0:
                self._replay_batch(h, lambda: memoryview(buf)[pos : pos + size], txn_index)
            if h.partition_leader_epoch > cache.latest_epoch:
                cache.assign(h.partition_leader_epoch, h.base_offset)

    def assign_leader_epoch(self, epoch: int) -> None:
        """Record that ``epoch`` starts at the log end offset (a new leader, before its first append)."""
        with self._lock:
            self.leader_epoch_cache.assign(epoch, self.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for an OffsetForLeaderEpoch request (see LeaderEpochFileCache.end_offset_for)."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # ------------------------------------------------------------------------------------- read

    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True, max_offset: int | None = None) -> FetchSlice:
        """The file region holding the batches from the one containing ``offset`` on.

        At most ``max_bytes`` (the region may end with a partial batch), except that with
        ``min_one_batch`` a first batch larger than ``max_bytes`` is returned whole. The region never
        crosses a segment end, nor, with ``max_offset`` (the high watermark, a batch boundary), the
        start of the batch holding ``max_offset``. Raises OffsetOutOfRangeError outside [log start,
        log end]; returns an empty slice at the log end offset and from ``max_offset`` on.
        """
        with self._lock:
            end_offset = self.log_end_offset
            if offset < self.log_start_offset or offset > end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside [{self.log_start_offset}, {end_offset}] of {self.dir.name}"
                )
            if max_offset is None or max_offset >= end_offset:
                max_offset = end_offset
            if offset >= max_offset:
                return FetchSlice(None, 0, 0)
            segments = self._segments
            bases = self._bases
            i = bisect_right(bases, offset) - 1
            while i < len(segments):
                segment = segments[i]
                end = segment.size
                if max_offset < end_offset and max_offset < (bases[i + 1] if i + 1 < len(bases) else end_offset):
                    bound = segment.locate(max_offset, end)
                    if bound is not None:
                        end = bound[0]
                found = segment.locate(offset, end)
                if found is not None:
                    position, batch_size = found
                    limit = batch_size if min_one_batch and batch_size > max_bytes else max_bytes
                    size = min(end - position, limit)
                    if size <= 0:
                        return FetchSlice(None, 0, 0)
                    return FetchSlice(os.dup(segment.fd), position, size)
                i += 1
            return FetchSlice(None, 0, 0)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= ``timestamp``, or None.

        As Kafka: segments and batches are skipped by their largest timestamp, so with timestamps
        out of order this is the first such record of the first batch that reaches ``timestamp``."""
        with self._lock:
            for segment in self._segments:
                if segment.max_timestamp >= timestamp:
                    found = segment.find_timestamp(timestamp, self.log_start_offset)
                    if found is not None:
                        return found
            return None

    def offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """The paper's getOffsetsBefore: segment base offsets whose data is no newer than ``timestamp``,
        newest first, at most ``max_num_offsets`` of them.

        -1 (latest) starts from the log end offset and goes back through every segment; -2 (earliest)
        gives the log start offset. The active segment counts as written now.
        """
        with self._lock:
            points = [(segment.base_offset, segment.largest_timestamp) for segment in self._segments]
            if self._segments[-1].size > 0:
                points.append((self.log_end_offset, self._time_ms()))
            if timestamp == -2:
                start = 0
            elif timestamp == -1:
                start = len(points) - 1
            else:
                start = -1
                for index, (_, written) in enumerate(points):
                    if written <= timestamp:
                        start = index
            return [offset for offset, _ in reversed(points[: start + 1])][: max(0, max_num_offsets)]

    # ------------------------------------------------------------------------------ replication

    def update_high_watermark(self, value: int) -> int:
        """Set the high watermark, clamped to [log start offset, log end offset]; return it. Completed
        transactions whose markers it passed stop holding the last stable offset."""
        with self._lock:
            self.high_watermark = min(max(value, self.log_start_offset), self.log_end_offset)
            self.producer_state.on_high_watermark(self.high_watermark)
            return self.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open (or completed, unreplicated) transaction,
        bounded by the high watermark and at least the log start offset (Kafka's lastStableOffset)."""
        state = self.producer_state
        if not state.ongoing and not state.unreplicated:
            return self.high_watermark  # no transaction: the cheap check the fetch path pays
        with self._lock:
            first = state.first_unstable_offset()
            high_watermark = self.high_watermark
            if first is None or first >= high_watermark:
                return high_watermark
            return max(first, self.log_start_offset)

    def collect_aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping what a fetch from ``start``
        reads below ``upper`` (the LSO): a read never crosses the end of ``start``'s segment, so neither does
        the range asked of the txn indexes (Kafka's collectAbortedTransactions for a fetch)."""
        with self._lock:
            following = bisect_right(self._bases, start)
            if following < len(self._bases):
                upper = min(upper, self._bases[following])
            return [(txn.producer_id, txn.first_offset) for txn in self.aborted_transactions(start, upper)]

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The txn index entries of the aborted transactions overlapping [start, upper)."""
        found: list[AbortedTxn] = []
        with self._lock:
            segments = self._segments
            for i in range(max(0, bisect_right(self._bases, start) - 1), len(segments)):
                entries, complete = segments[i].txn_index.collect(start, upper)
                found += entries
                if complete:
                    break
        return found

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at and above ``offset`` (a follower's divergent tail); False, doing
        nothing, when ``offset`` is at or above the log end offset. Below the log start offset the
        log is emptied and starts at ``offset``.

        Newer segments go first, then the cut segment's file is cut and synced before its index
        entries, so a crash midway leaves a log whose load neither trusts nor resurrects the tail."""
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir.name} is closed")
            if offset >= self.log_end_offset:
                return False
            if offset < self.log_start_offset:
                self._truncate_fully_locked(offset)
            else:
                keep = max(1, bisect_right(self._bases, offset))
                if keep < len(self._segments):
                    self._drop_segments(keep)
                    self._segments[-1].hold_indexes()
                self._segments[-1].truncate_to_offset(offset)
                self.log_end_offset = self._segments[-1].next_offset
                self._after_truncation()
                self._load_producer_state()
        if self._on_truncated is not None:
            self._on_truncated(self)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Remove every segment and start an empty log at ``offset`` (a follower whose log end is
        below the leader's log start offset)."""
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir.name} is closed")
            self._truncate_fully_locked(offset)
        if self._on_truncated is not None:
            self._on_truncated(self)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._drop_segments(0)
        segment = LogSegment(self.dir, offset, self.config, self._time_ms())
        if segment.size:
            raise KafkaStorageError(f"segment file {segment.log_path} survived the truncation")
        self._segments = [segment]
        self._bases = [offset]
        fsync_dir(self.dir)
        self.log_start_offset = self.log_end_offset = offset
        self.producer_state.clear()
        for _, path in self.producer_state.list_snapshots():
            path.unlink(missing_ok=True)
        self._after_truncation()
        self.recovery_point = self.high_watermark = offset
        self.leader_epoch_cache.clear()

    def _drop_segments(self, keep: int) -> None:
        """Close the segments after the first ``keep`` and remove their files, newest first, then
        sync the directory."""
        doomed = self._segments[keep:]
        del self._segments[keep:]
        del self._bases[keep:]
        for segment in reversed(doomed):
            segment.close()
            for path in segment.paths():
                path.unlink(missing_ok=True)
        fsync_dir(self.dir)

    def _after_truncation(self) -> None:
        """Bring the recovery point, the high watermark and the epoch cache down to the new log end."""
        end = self.log_end_offset
        self._truncations += 1
        self.recovery_point = min(self.recovery_point, end)
        self.high_watermark = min(self.high_watermark, end)
        self._unflushed_messages = 0
        self.leader_epoch_cache.truncate_from_end(end)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (at most the log end offset), as a follower
        following its leader's; the segments wholly below it are deleted. False when it was not above."""
        doomed_files: list[Path] = []
        try:
            with self._lock:
                if self._closed:
                    raise KafkaStorageError(f"log {self.dir.name} is closed")
                offset = min(offset, self.log_end_offset)
                if offset <= self.log_start_offset:
                    return False
                self.log_start_offset = offset
                self._delete_head_locked(self._start_breached_count(), self._time_ms(), doomed_files)
                self._after_start_moved()
                return True
        finally:
            for path in doomed_files:
                path.unlink(missing_ok=True)

    def _after_start_moved(self) -> None:
        """Bring the recovery point, the high watermark, the producer state and the epoch cache up
        to a new log start offset."""
        start = self.log_start_offset
        self.recovery_point = max(self.recovery_point, start)
        self.high_watermark = max(self.high_watermark, start)
        self.producer_state.truncate_head(start)
        self.leader_epoch_cache.truncate_from_start(start)

    # ------------------------------------------------------------------------------ maintenance

    def roll(self) -> None:
        """Start a new active segment at the log end offset (no-op when the active one is empty)."""
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir.name} is closed")
            self._roll_locked()

    def _roll_locked(self) -> LogSegment:
        active = self._segments[-1]
        if active.size == 0:
            return active
        active.on_become_inactive()
        base = self.log_end_offset
        segment = LogSegment(self.dir, base, self.config, self._time_ms())
        if segment.size:
            raise KafkaStorageError(f"segment file {segment.log_path} already exists past the log end")
        self._segments.append(segment)
        self._bases.append(base)
        self._dir_dirty = True
        # Synced by the flush that covers the rolled segment, off the caller's thread.
        self._unsynced_files.append(self.producer_state.take_snapshot(base, durable=False))
        # Without a running executor the periodic or the shutdown flush covers the rolled segment.
        self._in_background(self.flush, base)
        return segment

    def _in_background(self, action: Callable[..., object], *args: object) -> bool:
        """Submit ``action`` to the executor; False when there is none or it has shut down."""
        if self._executor is None:
            return False
        try:
            self._executor.submit(action, *args)
        except RuntimeError:
            return False
        return True

    def sync(self) -> Future | None:
        """Flush everything appended so far; group commit when the log has an executor.

        Without an executor the flush runs here and None is returned. With one, the returned future
        is done once an fsync covering the current log end offset has finished: while one fsync runs,
        later callers wait for the next, which covers all of them.
        """
        if self._executor is None:
            self.flush()
            return None
        future: Future = Future()
        with self._lock:
            self._sync_waiters.append(future)
            if self._sync_running:
                return future
            self._sync_running = True
        if not self._in_background(self._run_syncs):
            self._run_syncs()
        return future

    def _run_syncs(self) -> None:
        while True:
            with self._lock:
                waiters, self._sync_waiters = self._sync_waiters, []
                if not waiters:
                    self._sync_running = False
                    return
            try:
                self.flush()
            except Exception as exc:
                for waiter in waiters:
                    waiter.set_exception(exc)
            else:
                for waiter in waiters:
                    waiter.set_result(None)

    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to`` (default: the log end offset) and
        move the recovery point there. The fsync runs without holding the log's lock; flushes of one
        log run one at a time, so a queue of them never holds many descriptors at once."""
        with self._flush_lock:
            self._flush(up_to)

    def _flush(self, up_to: int | None) -> None:
        with self._lock:
            if self._closed:
                return
            target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
            if target <= self.recovery_point and not self._dir_dirty and not self._parent_dir_dirty:
                return
            # From the segment holding the recovery point to the last one starting below the target.
            first = max(0, bisect_right(self._bases, self.recovery_point) - 1)
            to_sync = self._segments[first : bisect_left(self._bases, target)]
            files, self._unsynced_files = self._unsynced_files, []
            sync_dirs = [self.dir] if self._dir_dirty else []
            if self._parent_dir_dirty:
                sync_dirs.append(self.dir.parent)
            self._dir_dirty = self._parent_dir_dirty = False
            if target == self.log_end_offset:
                self._unflushed_messages = 0
            truncations = self._truncations
        started = time.perf_counter()
        # One segment at a time, so that a flush of many segments holds three descriptors, not 3 per segment.
        for segment in to_sync:
            with self._lock:
                if segment.fd < 0:
                    continue  # deleted by retention meanwhile
                fds = segment.open_for_sync()
            fsync_and_close(fds)
        for path in files:
            try:
                fsync_and_close([os.open(path, os.O_RDONLY)])
            except FileNotFoundError:
                pass
        for directory in sync_dirs:
            fsync_dir(directory)
        if self._on_flush is not None:
            self._on_flush(time.perf_counter() - started)
        with self._lock:
            if target > self.recovery_point and truncations == self._truncations:
                self.recovery_point = target
            self.last_flush_ms = self._time_ms()

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush segments rolled since the last flush, and everything when log.flush.interval.ms
        passed since the last flush. Returns whether anything was flushed."""
        now = self._time_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return False
            interval = self.config.flush_interval_ms
            if interval is not None and now - self.last_flush_ms >= interval and self.recovery_point < self.log_end_offset:
                target = self.log_end_offset
            elif self.recovery_point < self._bases[-1]:
                target = self._bases[-1]
            else:
                return False
        self.flush(target)
        return True

    def delete_retained_segments(self, now_ms: int | None = None) -> int:
        """Delete the oldest segments that are past retention by time or by size (never the active
        one); move the log start offset. Returns the number of segments deleted.

        The segments leave the log under its lock; their files are removed after it is released, so
        appends and reads never wait for the file system to free a large file."""
        now = self._time_ms() if now_ms is None else now_ms
        doomed_files: list[Path] = []
        try:
            with self._lock:
                if self._closed:
                    return 0
                doomed_files += self._purge_pending_deletes(now)
                return self._retain_locked(now, doomed_files)
        finally:
            for path in doomed_files:
                path.unlink(missing_ok=True)

    def _retain_locked(self, now: int, doomed_files: list[Path]) -> int:
        """Drop the segments past retention (the lock is held); add the files to remove to ``doomed_files``."""
        segments = self._segments
        deletable = len(segments) - 1 if self.config.delete else 0  # compact-only logs keep their segments
        count = 0
        retention_ms = self.config.retention_ms_limit
        if retention_ms is not None:
            while count < deletable and now - segments[count].largest_timestamp > retention_ms:
                count += 1
        retention_bytes = self.config.retention_bytes_limit
        if retention_bytes is not None:
            excess = self.size_in_bytes() - retention_bytes
            by_size = 0
            while by_size < deletable and excess - segments[by_size].size >= 0:
                excess -= segments[by_size].size
                by_size += 1
            count = max(count, by_size)
        return self._delete_head_locked(max(count, self._start_breached_count()), now, doomed_files)

    def _start_breached_count(self) -> int:
        """How many of the oldest segments lie wholly below the log start offset (never the active one)."""
        bases = self._bases
        count = 0
        while count + 1 < len(bases) and bases[count + 1] <= self.log_start_offset:
            count += 1
        return count

    def _delete_head_locked(self, count: int, now: int, doomed_files: list[Path]) -> int:
        """Take the ``count`` oldest segments out of the log and move its start; add the files to
        remove to ``doomed_files``. The lock is held."""
        if count == 0:
            return 0
        segments = self._segments
        doomed = segments[:count]
        del segments[:count]
        del self._bases[:count]
        self.log_start_offset = max(self.log_start_offset, segments[0].base_offset)
        for segment in doomed:
            doomed_files += self._delete_segment_files(segment, now)
        self._dir_dirty = True
        self._after_start_moved()
        return count

    def _delete_segment_files(self, segment: LogSegment, now: int) -> list[Path]:
        """Close a segment leaving the log and rename its files with the .deleted suffix (so that a
        cleaned segment can take its name); the files to remove now (none when file.delete.delay.ms
        keeps them for later)."""
        paths = segment.rename_for_deletion()
        segment.close()
        delay = self.config.file_delete_delay_ms
        if delay > 0:
            self._pending_deletes.append((now + delay, paths))
            return []
        return paths

    def _purge_pending_deletes(self, now: int | None) -> list[Path]:
        """Take the delayed deletions due at ``now`` (all with None) off the list; return their files."""
        due = []
        keep = []
        for deadline, paths in self._pending_deletes:
            if now is None or deadline <= now:
                due += paths
            else:
                keep.append((deadline, paths))
        self._pending_deletes = keep
        return due

    # -------------------------------------------------------------------------------- cleaning

    def segments_below(self, offset: int) -> list[LogSegment]:
        """The inactive segments whose base offset is below ``offset``, oldest first (a copy)."""
        with self._lock:
            return self._segments[: min(len(self._segments) - 1, bisect_left(self._bases, offset))]

    def active_segment_base(self) -> int:
        """The active segment's base offset: no offset at or above it is cleaned."""
        with self._lock:
            return self._bases[-1]

    def open_segment_for_reading(self, segment: LogSegment) -> int:
        """A new descriptor of ``segment``'s .log file, valid however the log changes later; the caller
        closes it. KafkaStorageError when the segment has left the log (retention, truncation)."""
        with self._lock:
            if self._closed or segment.fd < 0:
                raise KafkaStorageError(f"segment {segment.base_offset} of {self.dir.name} left the log")
            return os.dup(segment.fd)

    def replace_segments(self, new: LogSegment, old: list[LogSegment],
                         pause: Callable[[str], None] = lambda point: None) -> bool:
        """Swap the cleaned ``new`` segment (complete, synced, files suffixed .cleaned) in for ``old``
        (consecutive inactive segments, the first with new's base offset), as Kafka's replaceSegments:
        .cleaned renamed .swap, the old segments leave the log and are renamed .deleted (removed after
        file.delete.delay.ms, so reads in flight stay valid), then .swap takes the final names.

        False, nothing changed and ``new``'s files removed, when the log moved under the cleaner:
        closed, or ``old`` no longer its inactive segments. A truncation into or below ``old``
        leaves the cut segment active or gone, so a pass over data a follower truncated never
        brings it back. ``pause`` is called at the crash point "during-swap"."""
        doomed_files: list[Path] = []
        try:
            with self._lock:
                first = bisect_left(self._bases, new.base_offset)
                valid = (
                    not self._closed
                    and first + len(old) < len(self._segments)
                    and all(a is b for a, b in zip(self._segments[first : first + len(old)], old))
                )
                if not valid:
                    new.close()
                    doomed_files += new.paths()
                    return False
                new.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
                fsync_dir(self.dir)
                now = self._time_ms()
                self._segments[first : first + len(old)] = [new]
                self._bases[first : first + len(old)] = [new.base_offset]
                for i, segment in enumerate(old):
                    doomed_files += self._delete_segment_files(segment, now)
                    if i == 0:
                        pause("during-swap")
                fsync_dir(self.dir)
                new.change_suffix(SWAP_SUFFIX, "")
                fsync_dir(self.dir)
                return True
        finally:
            for path in doomed_files:
                path.unlink(missing_ok=True)

    def size_in_bytes(self) -> int:
        """Total bytes of the .log files; callable from any thread (it sums a copy of the segment list)."""
        return sum(segment.size for segment in list(self._segments))

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segment_base_offsets(self) -> list[int]:
        """Base offsets of the segments, oldest first (a copy)."""
        with self._lock:
            return list(self._bases)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close every file; write the producer-state snapshot. Does not flush."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            active = self._segments[-1]
            active.on_become_inactive()
            self.producer_state.take_snapshot(self.log_end_offset)
            for offset, path in self.producer_state.list_snapshots():
                if active.base_offset < offset < self.log_end_offset:
                    path.unlink(missing_ok=True)
            for segment in self._segments:
                segment.close()
            for path in self._purge_pending_deletes(None):
                path.unlink(missing_ok=True)

    def delete(self) -> None:
        """Close the log and remove its directory: renamed at once to ``<dir>.<uuid>-delete`` (so the
        partition can be created again right away), removed on the executor."""
        self.close()
        doomed = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")
        try:
            os.rename(self.dir, doomed)
        except FileNotFoundError:
            return
        if not self._in_background(shutil.rmtree, doomed, True):
            shutil.rmtree(doomed, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )

