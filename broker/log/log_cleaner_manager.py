"""Which logs the cleaner works on, and their cleaning state (Kafka's LogCleanerManager).

It keeps the ``cleaner-offset-checkpoint`` of every log directory (each log's first dirty offset, where
the last pass ended, so that a restart does not redo the work), picks the filthiest compacted log for a
cleaner thread, and keeps the state of the logs being cleaned or paused: a pass in progress can be
aborted (before a log's deletion or truncation) and the log paused until it is resumed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from broker.log.checkpoint import CheckpointFileError, OffsetCheckpointFile
from broker.log.log import Log
from broker.log.log_config import INT64_MAX

CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]


class LogCleaningAbortedError(Exception):
    """The pass of a log was aborted (its log is being deleted or truncated, or the cleaner stops)."""


@dataclass(frozen=True)
class LogToClean:
    """A compacted log and its sections: clean [log start, first dirty), dirty [first dirty, first
    uncleanable); ``needs_compaction_now`` when a dirty record waited past max.compaction.lag.ms."""

    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool

    @property
    def cleanable_ratio(self) -> float:
        """The dirty share of the cleanable bytes (Kafka's cleanableRatio)."""
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_offsets(log: Log, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether max.compaction.lag.ms forces a pass).

    The dirty section starts at the checkpoint (the log start when it is missing or out of range) and
    ends before the active segment, the last stable offset (the high watermark, or the first offset of
    an open transaction below it), and the first segment holding a record newer than min.compaction.lag.ms
    (Kafka's cleanableOffsets)."""
    config = log.config
    start = log.log_start_offset
    first_dirty = start if checkpoint is None or not start <= checkpoint <= log.log_end_offset else checkpoint
    uncleanable = min(log.active_segment_base(), max(start, log.last_stable_offset))
    segments = log.segments_below(uncleanable)
    if config.min_compaction_lag_ms > 0:
        for segment in segments:
            if segment.next_offset > first_dirty and segment.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    needs_now = False
    if config.max_compaction_lag_ms < INT64_MAX:
        for segment in segments:
            if segment.next_offset > first_dirty and segment.base_offset < uncleanable:
                first_ts = segment.first_batch_timestamp()
                needs_now = now_ms - (first_ts if first_ts >= 0 else segment.created_ms) > config.max_compaction_lag_ms
                break
    return first_dirty, max(first_dirty, uncleanable), needs_now


class LogCleanerManager:
    """The cleaning state of every compacted log and the cleaner-offset-checkpoint of each log directory."""

    def __init__(self, log_dirs: list[Path], logs: Callable[[], dict[TopicPartition, Log]]) -> None:
        self.log_dirs = list(log_dirs)
        self._logs = logs
        self._lock = threading.Condition()
        self._in_progress: set[TopicPartition] = set()
        self._aborting: set[TopicPartition] = set()
        # Set from abort_all (the cleaner stops) until resume_all: every pass, even one starting now, aborts.
        self._stopping = False
        self._paused: dict[TopicPartition, int] = {}
        self.uncleanable: set[TopicPartition] = set()
        # The dirty ratio of the log last chosen, for the max-dirty-percent metric.
        self.dirtiest_log_cleanable_ratio = 0.0
        self._checkpoint_lock = threading.Lock()

    # ------------------------------------------------------------------------------ checkpoints

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        """Every log directory's checkpointed first dirty offsets (an unreadable file counts as empty)."""
        offsets: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            try:
                offsets.update(OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT_FILE).read())
            except CheckpointFileError:
                pass  # the passes start over from the log start: only work is lost, no data
        return offsets

    def update_checkpoint(self, log_dir: Path, topic_partition: TopicPartition, offset: int | None) -> None:
        """Set (None: remove) one log's entry in its directory's checkpoint, dropping logs no longer there."""
        path = log_dir / CLEANER_OFFSET_CHECKPOINT_FILE
        with self._checkpoint_lock:
            try:
                offsets = OffsetCheckpointFile(path).read()
            except CheckpointFileError:
                offsets = {}
            live = {tp for tp, log in self._logs().items() if log.dir.parent == log_dir}
            offsets = {tp: o for tp, o in offsets.items() if tp in live}
            if offset is None:
                offsets.pop(topic_partition, None)
            else:
                offsets[topic_partition] = offset
            OffsetCheckpointFile(path).write(offsets)

    def maybe_truncate_checkpoint(self, log: Log) -> None:
        """After a truncation, bring the log's checkpoint down to its new log end offset."""
        tp = (log.topic, log.partition)
        checkpoint = self.all_cleaner_checkpoints().get(tp)
        if checkpoint is not None and checkpoint > log.log_end_offset:
            self.update_checkpoint(log.dir.parent, tp, log.log_end_offset)

    # ------------------------------------------------------------------------------- selection

    def logs_to_clean(self, now_ms: int) -> list[LogToClean]:
        """The dirty sections of every compacted log (its config read now: it changes at run time)."""
        checkpoints = self.all_cleaner_checkpoints()
        found = []
        for tp, log in self._logs().items():
            if not log.config.compact or log.closed:
                continue
            first_dirty, uncleanable, needs_now = cleanable_offsets(log, checkpoints.get(tp), now_ms)
            clean_bytes = dirty_bytes = 0
            # A segment a pass stopped inside counts as clean and as dirty (Kafka's logSegments(from, to)).
            for segment in log.segments_below(uncleanable):
                if segment.base_offset < first_dirty:
                    clean_bytes += segment.size
                if segment.next_offset > first_dirty and uncleanable > first_dirty:
                    dirty_bytes += segment.size
            found.append(LogToClean(tp, log, first_dirty, uncleanable, clean_bytes, dirty_bytes, needs_now))
        return found

    def grab_filthiest_compacted_log(self, now_ms: int) -> LogToClean | None:
        """The log most in need of cleaning, marked in progress; None when none is over its
        min.cleanable.dirty.ratio nor past max.compaction.lag.ms (Kafka's grabFilthiestCompactedLog)."""
        candidates = self.logs_to_clean(now_ms)
        with self._lock:
            eligible = [
                c for c in candidates
                if c.topic_partition not in self._in_progress
                and c.topic_partition not in self._paused
                and c.topic_partition not in self.uncleanable
                and c.dirty_bytes > 0
            ]
            self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for c in eligible), default=0.0)
            ready = [c for c in eligible if c.needs_compaction_now or c.cleanable_ratio >= c.log.config.min_cleanable_dirty_ratio]
            if not ready:
                return None
            chosen = max(ready, key=lambda c: (c.needs_compaction_now, c.cleanable_ratio))
            self._in_progress.add(chosen.topic_partition)
            return chosen

    # ------------------------------------------------------------------------------ abort/pause

    def check_cleaning_aborted(self, topic_partition: TopicPartition) -> None:
        """Raise LogCleaningAbortedError if the log's pass is being aborted (called by the pass)."""
        if self._stopping or topic_partition in self._aborting:
            raise LogCleaningAbortedError(f"cleaning of {topic_partition[0]}-{topic_partition[1]} was aborted")

    def done_cleaning(self, topic_partition: TopicPartition) -> None:
        """The log's pass has ended (finished, failed or aborted)."""
        with self._lock:
            self._in_progress.discard(topic_partition)
            self._aborting.discard(topic_partition)
            self._lock.notify_all()

    def abort_and_pause(self, topic_partition: TopicPartition) -> None:
        """Stop the log's pass (waiting until it has stopped) and keep the log out of cleaning until
        :meth:`resume`; pauses nest (Kafka's abortAndPauseCleaning)."""
        with self._lock:
            self._paused[topic_partition] = self._paused.get(topic_partition, 0) + 1
            if topic_partition in self._in_progress:
                self._aborting.add(topic_partition)
                while topic_partition in self._in_progress:
                    self._lock.wait()

    def resume(self, topic_partition: TopicPartition) -> None:
        """Undo one :meth:`abort_and_pause`."""
        with self._lock:
            count = self._paused.get(topic_partition, 0) - 1
            if count > 0:
                self._paused[topic_partition] = count
            else:
                self._paused.pop(topic_partition, None)

    def abort_all(self) -> None:
        """Ask every pass in progress, and any that starts until :meth:`resume_all`, to stop (at
        shutdown); does not wait."""
        with self._lock:
            self._stopping = True
            self._aborting |= self._in_progress

    def resume_all(self) -> None:
        """Let passes run again after :meth:`abort_all` (the cleaner starts)."""
        with self._lock:
            self._stopping = False

    def mark_uncleanable(self, topic_partition: TopicPartition) -> None:
        """Leave out a log whose pass failed (Kafka's uncleanable partitions)."""
        with self._lock:
            self.uncleanable.add(topic_partition)

    def forget(self, topic_partition: TopicPartition) -> None:
        """Drop a deleted log's state."""
        with self._lock:
            self.uncleanable.discard(topic_partition)
