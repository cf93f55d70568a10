"""ReplicaManager and Partition: which partitions this broker leads, appends to them and reads from them.

The layer between the request handlers (KafkaApis) and the storage (Log). It owns one Partition per
hosted topic-partition, turns storage errors into Kafka error codes per partition, and lets a fetch
that found too little data wait until an append to one of its partitions wakes it (Kafka's delayed
fetch purgatory, reduced to what one event loop needs). With replication factor 1 the high watermark
is the log end offset; replication will move it behind the followers' positions.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from broker.log.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from broker.log.log import Log
from broker.log.log_config import LogConfig
from broker.log.log_manager import LogManager
from broker.metrics import BrokerMetrics, TopicStats
from pipeline.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# What reading a log raises when its files are unusable (I/O errors, descriptors exhausted, a damaged
# segment): KAFKA_STORAGE_ERROR for that partition, the others in the request are still served.
STORAGE_ERRORS = (OSError, CorruptRecordError, KafkaStorageError)


class Partition:
    """One topic-partition this broker leads: its log, leader epoch, the fetches waiting on it and its
    topic's counters."""

    __slots__ = ("topic", "index", "log", "leader_epoch", "stats", "_waiters")

    def __init__(self, topic: str, index: int, log: Log, leader_epoch: int = -1,
                 stats: TopicStats | None = None) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.stats = stats if stats is not None else TopicStats()
        # -1 tells clients not to validate offsets by leader epoch (OffsetForLeaderEpoch is not served).
        self.leader_epoch = leader_epoch
        self._waiters: list[asyncio.Future] = []

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    def add_waiter(self, future: asyncio.Future) -> None:
        self._waiters.append(future)

    def remove_waiter(self, future: asyncio.Future) -> None:
        try:
            self._waiters.remove(future)
        except ValueError:
            pass

    def wake_waiters(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(None)


class PendingSync(NamedTuple):
    """An append's fsync that must finish before the append is acknowledged."""

    topic: str
    index: int
    future: Future


class AppendResult(NamedTuple):
    """The outcome of appending to one partition, as Produce reports it."""

    error_code: int
    base_offset: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()


@dataclass
class FetchResult:
    """The outcome of reading one partition, as Fetch reports it; ``records`` may be a file region.
    ``stats`` are the counters of the partition's topic when this broker leads it."""

    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: object = b""
    size: int = 0
    stats: TopicStats | None = None

    def release(self) -> None:
        close = getattr(self.records, "close", None)
        if close is not None:
            close()
        self.records = b""
        self.size = 0


class ReplicaManager:
    """All partitions hosted by this broker, with append, read and wait operations on them."""

    def __init__(self, log_manager: LogManager, is_known: Callable[[str, int], bool] | None = None,
                 metrics: BrokerMetrics | None = None) -> None:
        """``is_known(topic, index)`` tells whether the cluster has a partition this broker does not lead
        (cluster mode); requests for those get NOT_LEADER_OR_FOLLOWER instead of UNKNOWN_TOPIC_OR_PARTITION.
        ``metrics`` gets the per-topic counters of appends and reads (of partitions this broker leads)."""
        self._log_manager = log_manager
        self._partitions: dict[TopicPartition, Partition] = {}
        self._is_known = is_known
        self.metrics = metrics if metrics is not None else BrokerMetrics()

    def make_leader(self, topic: str, index: int, config: LogConfig | None = None, leader_epoch: int = -1) -> Partition:
        """Host ``topic``-``index`` as its leader, creating its log when it does not exist yet."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            partition = Partition(topic, index, self._log_manager.get_or_create_log(topic, index, config), leader_epoch,
                                  self.metrics.topic_stats(topic))
            self._partitions[(topic, index)] = partition
        else:
            partition.leader_epoch = leader_epoch
        return partition

    def missing_partition_error(self, topic: str, index: int) -> int:
        """The error for a request to a partition this broker does not lead."""
        if self._is_known is not None and self._is_known(topic, index):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def stop_partition(self, topic: str, index: int, delete: bool) -> None:
        """Stop hosting a partition; ``delete`` also removes its log from disk."""
        partition = self._partitions.pop((topic, index), None)
        if partition is not None:
            partition.wake_waiters()
        if delete:
            self._log_manager.delete_log(topic, index)
            if not any(t == topic for t, _ in self._partitions):
                self.metrics.remove_topic(topic)

    def log_dir(self, topic: str, index: int) -> Path | None:
        """The directory of the partition's log on disk, hosted or not; None when there is no log."""
        existing = self._log_manager.get_log(topic, index)
        return None if existing is None else existing.dir

    def partitions_on_disk(self) -> list[TopicPartition]:
        """Every topic-partition whose log the log manager loaded, hosted or not."""
        return list(self._log_manager.all_logs())

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def hosted_partitions(self) -> list[Partition]:
        """A copy of the hosted partitions, taken in one step: callable from a thread other than the loop's."""
        return list(self._partitions.values())

    def append_records(self, topic: str, index: int, records: memoryview | bytes | None,
                       syncs: list[PendingSync] | None = None) -> AppendResult:
        """Append one partition's batches as leader; storage errors become that partition's error code.

        When the log says the append must be synced before it is acknowledged (its flush interval was
        reached), the pending fsync is added to ``syncs``; :meth:`wait_synced` waits for such syncs.
        Without ``syncs`` the caller does not wait (acks=0)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return AppendResult(self.missing_partition_error(topic, index))
        stats = partition.stats
        if not records:
            # Kafka: "Produce requests with version 3+ must have at least one record batch".
            stats.failed_produce += 1
            return AppendResult(ErrorCode.INVALID_RECORD, error_message="the partition's record set is empty")
        try:
            info = partition.log.append_as_leader(records, partition.leader_epoch)
        except OSError as exc:
            stats.failed_produce += 1
            log.error("append to %s-%d failed: %s", topic, index, exc)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, error_message=f"storage error: {exc}")
        except Exception as exc:
            stats.failed_produce += 1
            code = getattr(exc, "error_code", None)
            if code is None:
                log.exception("append to %s-%d failed", topic, index)
                return AppendResult(ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc))
            log.warning("rejected produce to %s-%d: %s", topic, index, exc)
            return AppendResult(code, error_message=str(exc), record_errors=tuple(getattr(exc, "record_errors", ())))
        if not info.duplicate:
            stats.messages_in += info.last_offset - info.first_offset + 1
            stats.bytes_in += len(records)
            partition.wake_waiters()
        if info.sync is not None and syncs is not None:
            syncs.append(PendingSync(topic, index, info.sync))
        return AppendResult(ErrorCode.NONE, info.first_offset, info.log_start_offset)

    @staticmethod
    async def wait_synced(syncs: list[PendingSync]) -> dict[TopicPartition, int]:
        """Wait until every pending fsync is done; the error code of each partition whose fsync failed."""
        outcomes = await asyncio.gather(*(asyncio.wrap_future(sync.future) for sync in syncs), return_exceptions=True)
        failed = {}
        for sync, outcome in zip(syncs, outcomes):
            if isinstance(outcome, BaseException):
                log.error("fsync of %s-%d failed: %s", sync.topic, sync.index, outcome)
                failed[(sync.topic, sync.index)] = ErrorCode.KAFKA_STORAGE_ERROR
        return failed

    def read(self, topic: str, index: int, offset: int, max_bytes: int, min_one_batch: bool) -> FetchResult:
        """Read one partition from ``offset``; the result holds a file region to send, or an error."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return FetchResult(self.missing_partition_error(topic, index))
        log_ = partition.log
        try:
            region = log_.read(offset, max_bytes, min_one_batch)
        except OffsetOutOfRangeError:
            partition.stats.failed_fetch += 1
            return FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, log_.log_end_offset, log_.log_start_offset)
        except STORAGE_ERRORS as exc:
            partition.stats.failed_fetch += 1
            log.error("reading %s-%d at offset %d failed: %s", topic, index, offset, exc)
            return FetchResult(ErrorCode.KAFKA_STORAGE_ERROR)
        if region.size == 0:
            region.close()
            return FetchResult(ErrorCode.NONE, log_.log_end_offset, log_.log_start_offset)
        return FetchResult(ErrorCode.NONE, log_.log_end_offset, log_.log_start_offset, region, region.size,
                           partition.stats)

    async def wait_for_data(self, topic_partitions: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until one of the partitions gets an append, or the timeout passes; True if woken."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        watched = [p for tp in topic_partitions if (p := self._partitions.get(tp)) is not None]
        for partition in watched:
            partition.add_waiter(future)
        try:
            await asyncio.wait_for(future, timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            for partition in watched:
                partition.remove_waiter(future)
