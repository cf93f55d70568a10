"""All partition logs of one broker across its log directories (Kafka's LogManager).

It loads every ``<topic>-<partition>`` directory at startup (recovering after an unclean
shutdown), creates and deletes logs, and runs the periodic duties the broker schedules:
retention, flushing, and the recovery-point and high-watermark checkpoints.
"""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import Executor
from pathlib import Path
from typing import Callable

from broker.log.checkpoint import CheckpointFileError, OffsetCheckpointFile
from broker.log.log import DELETED_DIR_SUFFIX, Log, now_ms, parse_topic_partition
from broker.log.cleaner import CleanerConfig
from broker.log.log_cleaner import LogCleaner
from broker.log.log_config import LogConfig

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class LogManager:
    """Owns every Log of a broker; one directory per partition under one of ``log_dirs``.

    Logs loaded at startup get the default ``config``; the layer above applies per-topic
    overrides by passing a config to :meth:`get_or_create_log`. The ``scheduler`` (the broker's
    background pool) is handed to every log for its fsyncs and deletions, and ``on_flush`` is told the
    time of every log's flushes. With a ``cleaner_config`` it owns the log cleaner of the compacted
    logs (``self.cleaner``), started by :meth:`startup` and stopped by :meth:`shutdown`.
    """

    def __init__(self, log_dirs: list[Path], config: LogConfig, time_ms: Callable[[], int] = now_ms,
                 scheduler: Executor | None = None, on_flush: Callable[[float], None] | None = None,
                 cleaner_config: CleanerConfig | None = None) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config = config
        self._time_ms = time_ms
        self._scheduler = scheduler
        self._on_flush = on_flush
        self._logs: dict[tuple[str, int], Log] = {}
        self._lock = threading.RLock()
        # Checkpoint files are rewritten through one temporary name each: one writer at a time.
        self._checkpoint_lock = threading.Lock()
        # What each checkpoint file was last written with: an idle broker does not rewrite (and fsync) it unchanged.
        self._checkpointed: dict[Path, dict[tuple[str, int], int]] = {}
        self.cleaner = None if cleaner_config is None else LogCleaner(cleaner_config, self.log_dirs, self.all_logs, time_ms)

    def startup(self) -> None:
        """Load every partition directory; recover those of a directory without the clean-shutdown
        marker from their checkpointed recovery point; then remove the marker."""
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery_points = self._read_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT_FILE)
            high_watermarks = self._read_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)
            for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETED_DIR_SUFFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                topic_partition = parse_topic_partition(entry.name)
                if topic_partition is None:
                    continue
                with self._lock:
                    if topic_partition in self._logs:
                        raise ValueError(f"partition {entry.name} exists in two log directories")
                    log = self._logs[topic_partition] = Log(
                        log_dir / entry.name,
                        self.config,
                        recovery_point=recovery_points.get(topic_partition, 0),
                        last_shutdown_clean=clean,
                        time_ms=self._time_ms,
                        executor=self._scheduler,
                        on_flush=self._on_flush,
                        on_truncated=self._on_truncated,
                    )
                    log.update_high_watermark(high_watermarks.get(topic_partition, 0))
            marker.unlink(missing_ok=True)
        if self.cleaner is not None:
            self.cleaner.startup()

    @staticmethod
    def _read_checkpoint(log_dir: Path, name: str) -> dict[tuple[str, int], int]:
        """A checkpoint file's entries; {} when it is missing or unreadable (the offsets start over)."""
        try:
            return OffsetCheckpointFile(log_dir / name).read()
        except CheckpointFileError:
            return {}

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created (in the directory holding the fewest logs) if missing.

        A given ``config`` replaces the log's current one (topic-level overrides).
        """
        if not topic or topic in (".", "..") or "/" in topic or os.sep in topic:
            raise ValueError(f"invalid topic name {topic!r}")
        if partition < 0:
            raise ValueError(f"invalid partition {partition}")
        with self._lock:
            log = self._logs.get((topic, partition))
            if log is None:
                log = Log(
                    self._next_log_dir() / f"{topic}-{partition}",
                    config or self.config,
                    time_ms=self._time_ms,
                    executor=self._scheduler,
                    on_flush=self._on_flush,
                    on_truncated=self._on_truncated,
                )
                self._logs[(topic, partition)] = log
            elif config is not None:
                log.config = config
            return log

    def _next_log_dir(self) -> Path:
        counts = {log_dir: 0 for log_dir in self.log_dirs}
        for log in self._logs.values():
            if log.dir.parent in counts:
                counts[log.dir.parent] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> None:
        """Close the partition's log and remove its directory, in the background (no-op when unknown)."""
        if self.cleaner is not None:
            self.cleaner.abort_and_pause(topic, partition)
        try:
            with self._lock:
                log = self._logs.pop((topic, partition), None)
            if log is not None:
                log.delete()
                if self.cleaner is not None:
                    self.cleaner.forget(log)
        finally:
            if self.cleaner is not None:
                self.cleaner.resume(topic, partition)

    def truncate_to(self, topic: str, partition: int, offset: int) -> bool:
        """Truncate the partition's log to ``offset`` (Log.truncate_to) with its cleaning aborted and
        paused meanwhile, as Kafka's LogManager.truncateTo; False when there is no such log."""
        log = self.get_log(topic, partition)
        if log is None:
            return False
        if self.cleaner is not None:
            self.cleaner.abort_and_pause(topic, partition)
        try:
            return log.truncate_to(offset)
        finally:
            if self.cleaner is not None:
                self.cleaner.resume(topic, partition)

    def all_logs(self) -> dict[tuple[str, int], Log]:
        with self._lock:
            return dict(self._logs)

    def run_retention(self) -> int:
        """Apply retention to every log; return the number of segments deleted."""
        now = self._time_ms()
        return sum(log.delete_retained_segments(now) for log in self.all_logs().values())

    def flush_dirty_logs(self) -> None:
        """Flush rolled segments everywhere and whole logs whose log.flush.interval.ms passed."""
        now = self._time_ms()
        for log in self.all_logs().values():
            log.maybe_flush(now)

    def checkpoint_recovery_points(self, log_dirs: list[Path] | None = None) -> None:
        """Write the recovery-point-offset-checkpoint of each log directory (default: all)."""
        self._checkpoint(RECOVERY_POINT_CHECKPOINT_FILE, lambda log: log.recovery_point, log_dirs)

    def checkpoint_high_watermarks(self) -> None:
        """Write every log directory's replication-offset-checkpoint (the logs' high watermarks)."""
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT_FILE, lambda log: log.high_watermark, None)

    def _checkpoint(self, name: str, offset_of: Callable[[Log], int], log_dirs: list[Path] | None) -> None:
        logs = self.all_logs()
        with self._checkpoint_lock:
            for log_dir in self.log_dirs if log_dirs is None else log_dirs:
                offsets = {tp: offset_of(log) for tp, log in logs.items() if log.dir.parent == log_dir}
                path = log_dir / name
                if self._checkpointed.get(path) == offsets and path.exists():
                    continue
                self._checkpointed.pop(path, None)
                OffsetCheckpointFile(path).write(offsets)
                self._checkpointed[path] = offsets

    def _on_truncated(self, log: Log) -> None:
        # Kafka checkpoints right after a truncation: data appended above the new end must not be
        # taken for flushed because the file still holds the old, higher recovery point.
        self.checkpoint_recovery_points([log.dir.parent])
        if self.cleaner is not None:
            self.cleaner.manager.maybe_truncate_checkpoint(log)

    def shutdown(self) -> None:
        """Flush and close every log, checkpoint the recovery points and high watermarks, write the
        clean-shutdown marker. The cleaner stops first; a pass in progress is abandoned."""
        if self.cleaner is not None:
            self.cleaner.shutdown()
        logs = self.all_logs()
        for log in logs.values():
            log.flush()
        self.checkpoint_recovery_points()
        self.checkpoint_high_watermarks()
        for log in logs.values():
            log.close()
        for log_dir in self.log_dirs:
            (log_dir / CLEAN_SHUTDOWN_FILE).touch()
        with self._lock:
            self._logs.clear()
