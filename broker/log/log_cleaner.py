"""The log cleaner: compaction of ``cleanup.policy=compact`` logs (Kafka's LogCleaner).

Cleaner threads repeatedly take the filthiest compacted log (see LogCleanerManager) and run a pass over
it (see cleaner.Cleaner) in a worker process of their own, so that the CPU a pass takes does not hold
the interpreter the broker's event loop runs on; the end of each pass is written to the
cleaner-offset-checkpoint. The LogManager owns the LogCleaner.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from broker.log.cleaner import Cleaner, CleanerConfig, CleanerStats, CleaningJob, LocalTarget
from broker.log.cleaner_process import CleanerProcess, CleanerWorkerError
from broker.log.errors import KafkaStorageError
from broker.log.log import Log, now_ms
from broker.log.log_cleaner_manager import LogCleanerManager, LogCleaningAbortedError, LogToClean, TopicPartition
from pipeline.error_text import describe_error

__all__ = ["LogCleaner", "LogCleaningStats"]

log = logging.getLogger(__name__)


@dataclass
class LogCleaningStats:
    """A log's cleaning totals since the broker started, for the metrics."""

    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    clean_time_secs: float = 0.0
    last_clean_ms: int = -1


class LogCleaner:
    """The broker's log cleaner: ``log.cleaner.threads`` threads cleaning the compacted logs of
    ``logs()`` (Kafka's LogCleaner), each running its passes in a worker process of its own (see
    cleaner_worker) so that cleaning does not hold the interpreter the event loop runs on. The
    LogManager owns it and pauses a log's cleaning around the log's deletion and truncation."""

    def __init__(self, config: CleanerConfig, log_dirs: list[Path], logs: Callable[[], dict[TopicPartition, Log]],
                 time_ms: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.manager = LogCleanerManager(log_dirs, logs)
        self._logs = logs
        self._time_ms = time_ms
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._local_cleaner: Cleaner | None = None
        self._workers: dict[int, CleanerProcess] = {}
        self._stats_lock = threading.Lock()
        self._log_stats: dict[TopicPartition, LogCleaningStats] = {}
        self.last_stats: CleanerStats | None = None
        self._last_run_ms = time_ms()

    def startup(self) -> None:
        """Start log.cleaner.threads threads (none when log.cleaner.enable is false)."""
        if not self.config.enable or self._threads:
            return
        self._stop.clear()
        self.manager.resume_all()
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, args=(i,), name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def shutdown(self) -> None:
        """Stop the threads and their workers; a pass in progress is abandoned (its .cleaned files removed)."""
        self._stop.set()
        self.manager.abort_all()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _run(self, i: int) -> None:
        # The worker belongs to this thread: it is killed when the thread that started it ends.
        worker = self._workers[i] = CleanerProcess(self.config, self.manager)
        backoff = self.config.backoff_ms / 1000
        try:
            while not self._stop.is_set():
                if not self.clean_filthiest_log(worker.clean):
                    self._stop.wait(backoff)
        finally:
            worker.close()
            self._workers.pop(i, None)

    def clean_once(self) -> bool:
        """Clean the filthiest log now, in the calling thread (no worker process); whether there was one."""
        if self._local_cleaner is None:
            self._local_cleaner = Cleaner(self.config, self._time_ms)
        cleaner = self._local_cleaner
        return self.clean_filthiest_log(
            lambda to_clean: cleaner.clean(CleaningJob.of(to_clean),
                                           LocalTarget(to_clean.log, self.manager, to_clean.topic_partition,
                                                       self.config.faults)))

    def clean_filthiest_log(self, clean: Callable[[LogToClean], tuple[int, CleanerStats]]) -> bool:
        """One pass, by ``clean``, over the log most in need of it (Kafka's cleanFilthiestLog)."""
        to_clean = self.manager.grab_filthiest_compacted_log(self._time_ms())
        self._last_run_ms = self._time_ms()
        if to_clean is None:
            return False
        tp = to_clean.topic_partition
        try:
            end, stats = clean(to_clean)
            self.manager.update_checkpoint(to_clean.log.dir.parent, tp, end)
            self._record(tp, stats)
        except (LogCleaningAbortedError, KafkaStorageError) as exc:
            log.info("cleaning of %s-%d stopped: %s", tp[0], tp[1], exc)
        except Exception as exc:
            # As Kafka: whatever failed, the log is left alone from now on and the thread goes on with the others.
            if self._stop.is_set():
                log.info("cleaning of %s-%d stopped at shutdown: %s", tp[0], tp[1], describe_error(exc))
            else:
                from_worker = isinstance(exc, CleanerWorkerError)  # its text names the worker's error already
                log.error("cleaning of %s-%d failed, the log is left uncleaned: %s", tp[0], tp[1],
                          exc if from_worker else describe_error(exc), exc_info=not from_worker)
                self.manager.mark_uncleanable(tp)
        finally:
            self.manager.done_cleaning(tp)
        return True

    def _record(self, tp: TopicPartition, stats: CleanerStats) -> None:
        with self._stats_lock:
            totals = self._log_stats.setdefault(tp, LogCleaningStats())
            totals.passes += 1
            totals.bytes_read += stats.bytes_read
            totals.bytes_written += stats.bytes_written
            totals.clean_time_secs += stats.elapsed_secs
            totals.last_clean_ms = self._time_ms()
            self.last_stats = stats
        log.info("cleaned %s-%d: %d -> %d bytes (%d -> %d records) in %.3f s, %.1f%% of the offset map used",
                 tp[0], tp[1], stats.bytes_read, stats.bytes_written, stats.messages_read, stats.messages_written,
                 stats.elapsed_secs, 100 * stats.buffer_utilization)

    def abort_and_pause(self, topic: str, partition: int) -> None:
        """Stop the log's pass in progress (waiting for it) and keep the log out of cleaning until resumed."""
        self.manager.abort_and_pause((topic, partition))

    def resume(self, topic: str, partition: int) -> None:
        """Let the log be cleaned again after :meth:`abort_and_pause`."""
        self.manager.resume((topic, partition))

    def forget(self, log_: Log) -> None:
        """Drop a deleted log's checkpoint entry and statistics."""
        tp = (log_.topic, log_.partition)
        self.manager.forget(tp)
        self.manager.update_checkpoint(log_.dir.parent, tp, None)
        with self._stats_lock:
            self._log_stats.pop(tp, None)

    def stats(self) -> dict[str, object]:
        """Per compacted log its dirty ratio, bytes read, written and recovered, cleaning time and
        whether it is uncleanable; and Kafka's LogCleaner / LogCleanerManager gauges."""
        now = self._time_ms()
        per_log: dict[TopicPartition, dict[str, object]] = {}
        backlog = 0
        with self._stats_lock:
            totals = dict(self._log_stats)
            last = self.last_stats
        for to_clean in self.manager.logs_to_clean(now):
            tp = to_clean.topic_partition
            done = totals.get(tp, LogCleaningStats())
            backlog += to_clean.dirty_bytes
            per_log[tp] = {
                "dirty_ratio": to_clean.cleanable_ratio,
                "dirty_bytes": to_clean.dirty_bytes,
                "bytes_read": done.bytes_read,
                "bytes_written": done.bytes_written,
                "bytes_recovered": done.bytes_read - done.bytes_written,
                "clean_time_secs": done.clean_time_secs,
                "passes": done.passes,
                "uncleanable": tp in self.manager.uncleanable,
            }
        return {
            "logs": per_log,
            "max_dirty_percent": 100 * max((s["dirty_ratio"] for s in per_log.values()), default=0.0),  # type: ignore[type-var]
            "time_since_last_run_ms": max(0, now - self._last_run_ms),
            "max_buffer_utilization_percent": 100 * last.buffer_utilization if last else 0.0,
            "max_clean_time_secs": last.elapsed_secs if last else 0.0,
            "cleaner_recopy_percent": 100 * last.bytes_written / last.bytes_read if last and last.bytes_read else 0.0,
            "uncleanable_partitions_count": len(self.manager.uncleanable),
            "backlog_bytes": backlog,
            "workers": {i: usage for i, worker in list(self._workers.items())
                        if (usage := worker.resource_usage()) is not None},
            "bytes_read": sum(s.bytes_read for s in totals.values()),
            "bytes_written": sum(s.bytes_written for s in totals.values()),
        }
