"""ReplicaManager: the partitions this broker hosts, as leader or follower, and the operations on them.

The layer between the request handlers (KafkaApis) and the storage (Log). It owns one Partition per
hosted topic-partition (leaders and followers apart), turns storage errors into Kafka error codes per
partition, serves followers' fetches (recording their positions, which moves the ISR and the high
watermark), bounds consumers' reads by the high watermark, holds acks=all produces until the ISR has
their batches, and lets a fetch that found too little data wait until an append or a high watermark
move wakes it (Kafka's delayed fetch and delayed produce purgatories, reduced to what one event loop
needs). Followers' logs are written by the replica fetcher threads, never here.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from broker.log.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from broker.log.log_config import LogConfig
from broker.log.log_manager import LogManager
from broker.metrics import BrokerMetrics, TopicStats
from broker.partition import IsrProposer, Partition, monotonic_ms
from pipeline.protocol.errors import ErrorCode, to_error_code
from pipeline.warning_limiter import WarningLimiter

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# What reading a log raises when its files are unusable (I/O errors, descriptors exhausted, a damaged
# segment): KAFKA_STORAGE_ERROR for that partition, the others in the request are still served.
STORAGE_ERRORS = (OSError, CorruptRecordError, KafkaStorageError)


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
    last_offset: int = -1


@dataclass
class FetchResult:
    """The outcome of reading one partition, as Fetch reports it; ``records`` may be a file region.
    ``stats`` are the counters of the partition's topic when this broker leads it; ``aborted`` the
    (producer id, first offset) of the aborted transactions a read_committed read overlaps (None for
    read_uncommitted)."""

    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: object = b""
    size: int = 0
    stats: TopicStats | None = None
    last_stable_offset: int = -1
    aborted: list[tuple[int, int]] | None = None

    def release(self) -> None:
        close = getattr(self.records, "close", None)
        if close is not None:
            close()
        self.records = b""
        self.size = 0


class ReplicaManager:
    """All partitions hosted by this broker, with append, read and wait operations on them."""

    def __init__(self, log_manager: LogManager, is_known: Callable[[str, int], bool] | None = None,
                 metrics: BrokerMetrics | None = None, broker_id: int = -1,
                 isr_proposer: IsrProposer | None = None,
                 is_shutting_down: Callable[[int], bool] = lambda broker_id: False) -> None:
        """``is_known(topic, index)`` tells whether the cluster has a partition this broker does not lead
        (cluster mode); requests for those get NOT_LEADER_OR_FOLLOWER instead of UNKNOWN_TOPIC_OR_PARTITION.
        ``metrics`` gets the per-topic counters of appends and reads (of partitions this broker leads).
        ``isr_proposer`` stores a leader's ISR change (cluster mode); without one the ISR is this broker.
        ``is_shutting_down(broker)``: a follower in a controlled shutdown is not taken into an ISR. Produce
        rejections are logged through ``client_warnings``, per client address and error (the broker sets the socket
        server's limiter, which counts them in its client_errors metric)."""
        self._log_manager = log_manager
        self._partitions: dict[TopicPartition, Partition] = {}
        self._followers: dict[TopicPartition, Partition] = {}
        self._is_known = is_known
        self.metrics = metrics if metrics is not None else BrokerMetrics()
        self.broker_id = broker_id
        self.isr_proposer = isr_proposer
        self._is_shutting_down = is_shutting_down
        self.client_warnings = WarningLimiter(log)

    def _hosted(self, topic: str, index: int, config: LogConfig | None, leader_epoch: int) -> Partition:
        key = (topic, index)
        partition = self._partitions.pop(key, None) or self._followers.pop(key, None)
        if partition is None:
            partition = Partition(topic, index, self._log_manager.get_or_create_log(topic, index, config), leader_epoch,
                                  self.metrics.topic_stats(topic), self.broker_id)
        return partition

    def make_leader(self, topic: str, index: int, config: LogConfig | None = None, leader_epoch: int = -1,
                    replicas: tuple[int, ...] | None = None, isr: tuple[int, ...] | None = None,
                    zk_version: int = -1, controller_epoch: int = 0) -> Partition:
        """Host ``topic``-``index`` as its leader, creating its log when it does not exist yet. The caller
        has stopped fetching it first."""
        partition = self._hosted(topic, index, config, leader_epoch)
        me = (self.broker_id,)
        partition.become_leader(leader_epoch, replicas or me, isr or me, zk_version, controller_epoch)
        self._partitions[(topic, index)] = partition
        return partition

    def make_follower(self, topic: str, index: int, config: LogConfig | None, leader_id: int, leader_epoch: int,
                      replicas: tuple[int, ...]) -> Partition:
        """Host ``topic``-``index`` as a follower of ``leader_id`` (no leader: -1); the log is written by the
        replica fetcher from now on."""
        partition = self._hosted(topic, index, config, leader_epoch)
        partition.become_follower(leader_id, leader_epoch, replicas)
        self._followers[(topic, index)] = partition
        return partition

    def update_log_config(self, topic: str, indexes: Iterable[int], config: LogConfig) -> None:
        """Apply a topic's settings to the logs of those of its partitions ``indexes`` hosted here, leaders and
        followers (Kafka's LogManager.updateTopicConfig): every later append, roll, retention check and cleaning
        uses them."""
        for index in indexes:
            partition = self._partitions.get((topic, index)) or self._followers.get((topic, index))
            if partition is not None:
                partition.log.config = config

    def missing_partition_error(self, topic: str, index: int) -> int:
        """The error for a request to a partition this broker does not lead."""
        if (topic, index) in self._followers or (self._is_known is not None and self._is_known(topic, index)):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def stop_partition(self, topic: str, index: int, delete: bool) -> None:
        """Stop hosting a partition; ``delete`` also removes its log from disk."""
        for hosted in (self._partitions, self._followers):
            partition = hosted.pop((topic, index), None)
            if partition is not None:
                partition.become_follower(-1, partition.leader_epoch, partition.replicas)
        if delete:
            self._log_manager.delete_log(topic, index)
            if not any(t == topic for t, _ in self._partitions) and not any(t == topic for t, _ in self._followers):
                self.metrics.remove_topic(topic)

    def log_dir(self, topic: str, index: int) -> Path | None:
        """The directory of the partition's log on disk, hosted or not; None when there is no log."""
        existing = self._log_manager.get_log(topic, index)
        return None if existing is None else existing.dir

    def partitions_on_disk(self) -> list[TopicPartition]:
        """Every topic-partition whose log the log manager loaded, hosted or not."""
        return list(self._log_manager.all_logs())

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The partition if this broker leads it."""
        return self._partitions.get((topic, index))

    def get_follower(self, topic: str, index: int) -> Partition | None:
        """The partition if this broker follows it."""
        return self._followers.get((topic, index))

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def hosted_partitions(self) -> list[Partition]:
        """A copy of the led partitions, taken in one step: callable from a thread other than the loop's."""
        return list(self._partitions.values())

    def follower_partitions(self) -> list[Partition]:
        """A copy of the followed partitions, taken in one step (any thread)."""
        return list(self._followers.values())

    def append_records(self, topic: str, index: int, records: memoryview | bytes | None,
                       syncs: list[PendingSync] | None = None, required_acks: int = 1, client: str = "") -> AppendResult:
        """Append one partition's batches as leader; storage errors become that partition's error code.

        When the log says the append must be synced before it is acknowledged (its flush interval was
        reached), the pending fsync is added to ``syncs``; :meth:`wait_synced` waits for such syncs.
        Without ``syncs`` the caller does not wait (acks=0). With ``required_acks`` -1 the ISR must hold
        min.insync.replicas members (NOT_ENOUGH_REPLICAS, nothing appended). ``client`` (host:port) is named in
        the warning about a batch the log refuses (one line per client address and error per minute)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return AppendResult(self.missing_partition_error(topic, index))
        stats = partition.stats
        if not records:
            # Kafka: "Produce requests with version 3+ must have at least one record batch".
            stats.failed_produce += 1
            return AppendResult(ErrorCode.INVALID_RECORD, error_message="the partition's record set is empty")
        if required_acks == -1 and (code := partition.acks_error()):
            stats.failed_produce += 1
            return AppendResult(code, error_message=f"the ISR {sorted(partition.isr)} is smaller than "
                                f"min.insync.replicas {partition.min_insync_replicas}")
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
            self.client_warnings.warn(client.rpartition(":")[0], f"rejected_produce_{to_error_code(code).name.lower()}",
                                      "rejected produce to %s-%d from %s: %s", topic, index, client, exc)
            return AppendResult(code, error_message=str(exc), record_errors=tuple(getattr(exc, "record_errors", ())))
        if not info.duplicate:
            stats.messages_in += info.last_offset - info.first_offset + 1
            stats.bytes_in += len(records)
            if not partition.maybe_increment_high_watermark():
                partition.wake_follower_waiters()
        if info.sync is not None and syncs is not None:
            syncs.append(PendingSync(topic, index, info.sync))
        return AppendResult(ErrorCode.NONE, info.first_offset, info.log_start_offset, last_offset=info.last_offset)

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

    def is_replicated(self, topic: str, index: int, last_offset: int) -> bool:
        """Whether the high watermark is past ``last_offset`` already (with one replica: right after the append)."""
        partition = self._partitions.get((topic, index))
        return partition is not None and partition.high_watermark > last_offset

    async def wait_replicated(self, required: dict[TopicPartition, int], timeout_s: float) -> dict[TopicPartition, int]:
        """acks=all: wait until each partition's high watermark reaches its required offset, or the timeout.
        The error code of every partition that did not make it (REQUEST_TIMED_OUT on timeout)."""
        futures = {}
        for key, offset in required.items():
            partition = self._partitions.get(key)
            if partition is None:
                futures[key] = None
            else:
                futures[key] = partition.wait_for_high_watermark(offset)
        pending = [f for f in futures.values() if f is not None and not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        failed = {}
        for key, future in futures.items():
            if future is None:
                failed[key] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif not future.done():
                future.cancel()
                failed[key] = ErrorCode.REQUEST_TIMED_OUT
            elif future.result():
                failed[key] = future.result()
        return failed

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> tuple[Partition | None, int]:
        """The partition and NONE if this broker leads it in ``current_leader_epoch`` (-1: any epoch), else None
        and why not: not led here, or a fenced or unknown leader epoch."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return None, self.missing_partition_error(topic, index)
        if current_leader_epoch >= 0 and current_leader_epoch != partition.leader_epoch:
            if current_leader_epoch < partition.leader_epoch:
                return None, ErrorCode.FENCED_LEADER_EPOCH
            return None, ErrorCode.UNKNOWN_LEADER_EPOCH
        return partition, ErrorCode.NONE

    def read(self, topic: str, index: int, offset: int, max_bytes: int, min_one_batch: bool,
             replica_id: int = -1, current_leader_epoch: int = -1, read_committed: bool = False) -> FetchResult:
        """Read one partition from ``offset``; the result holds a file region to send, or an error.

        A consumer (``replica_id`` -1) reads below the high watermark only, below the last stable
        offset with ``read_committed`` (and then learns the aborted transactions the data overlaps);
        a follower reads up to the log end and its fetch offset is recorded as its log end offset
        (which may move the ISR and the high watermark)."""
        partition, code = self.leader_partition(topic, index, current_leader_epoch)
        if partition is None:
            return FetchResult(code)
        log_ = partition.log
        last_stable = log_.last_stable_offset
        if replica_id >= 0:
            joining = partition.update_follower(replica_id, offset, monotonic_ms())
            if joining is not None and not self._is_shutting_down(joining):
                self._propose_isr(partition, partition.isr | {joining})
            bound = log_.log_end_offset
        else:
            bound = last_stable if read_committed else partition.high_watermark
        if offset == bound and log_.log_start_offset <= offset <= log_.log_end_offset:
            # Nothing past the offset (an idle long poll): log_.read's empty answer without its lock or a slice.
            return FetchResult(ErrorCode.NONE, partition.high_watermark, log_.log_start_offset,
                               last_stable_offset=last_stable, aborted=[] if read_committed else None)
        return self._read_log(partition, offset, max_bytes, min_one_batch, replica_id < 0, read_committed, bound,
                              last_stable)

    def _read_log(self, partition: Partition, offset: int, max_bytes: int, min_one_batch: bool, consumer: bool,
                  read_committed: bool, bound: int, last_stable: int) -> FetchResult:
        """The read of :meth:`read` from the log, up to ``bound`` (the log end for a follower)."""
        topic, index, log_ = partition.topic, partition.index, partition.log
        max_offset = bound if consumer and bound < log_.log_end_offset else None
        try:
            region = log_.read(offset, max_bytes, min_one_batch, max_offset=max_offset)
        except OffsetOutOfRangeError:
            partition.stats.failed_fetch += 1
            return FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, partition.high_watermark, log_.log_start_offset)
        except STORAGE_ERRORS as exc:
            partition.stats.failed_fetch += 1
            log.error("reading %s-%d at offset %d failed: %s", topic, index, offset, exc)
            return FetchResult(ErrorCode.KAFKA_STORAGE_ERROR)
        aborted = [] if read_committed else None
        if region.size == 0:
            region.close()
            return FetchResult(ErrorCode.NONE, partition.high_watermark, log_.log_start_offset,
                               last_stable_offset=last_stable, aborted=aborted)
        if read_committed:
            aborted = log_.collect_aborted_transactions(offset, last_stable)
        return FetchResult(ErrorCode.NONE, partition.high_watermark, log_.log_start_offset, region, region.size,
                           partition.stats if consumer else None, last_stable, aborted)

    # -- transaction markers ---------------------------------------------------------------------

    def append_txn_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int, committed: bool,
                          coordinator_epoch: int) -> tuple[int, int]:
        """Append a commit or abort marker to a partition this broker leads, as WriteTxnMarkers does:
        (error code, the marker's offset). The ISR must hold min.insync.replicas (NOT_ENOUGH_REPLICAS);
        a stale producer epoch is INVALID_PRODUCER_EPOCH, a stale coordinator TRANSACTION_COORDINATOR_FENCED."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return self.missing_partition_error(topic, index), -1
        if code := partition.acks_error():
            return code, -1
        try:
            info = partition.log.append_control_marker(producer_id, producer_epoch, committed, coordinator_epoch,
                                                       partition.leader_epoch)
        except OSError as exc:
            log.error("writing a transaction marker to %s-%d failed: %s", topic, index, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR, -1
        except Exception as exc:
            code = getattr(exc, "error_code", None)
            if code is None:
                log.exception("writing a transaction marker to %s-%d failed", topic, index)
                return ErrorCode.UNKNOWN_SERVER_ERROR, -1
            log.info("transaction marker for producer %d refused by %s-%d: %s", producer_id, topic, index, exc)
            return code, -1
        if not partition.maybe_increment_high_watermark():
            partition.wake_follower_waiters()
        return ErrorCode.NONE, info.first_offset

    async def write_txn_markers(self, markers: list[tuple[str, int, int, int, bool, int]],
                                timeout_s: float = 30.0) -> list[int]:
        """Append each marker (topic, index, producer id, producer epoch, committed, coordinator epoch) to
        its partition and wait until the ISR has it (acks=all); the error code of each, in order."""
        codes: list[int] = []
        required: dict[TopicPartition, int] = {}
        for topic, index, producer_id, producer_epoch, committed, coordinator_epoch in markers:
            code, offset = self.append_txn_marker(topic, index, producer_id, producer_epoch, committed,
                                                  coordinator_epoch)
            codes.append(code)
            if not code and not self.is_replicated(topic, index, offset):
                required[(topic, index)] = max(required.get((topic, index), 0), offset + 1)
        if required:
            failed = await self.wait_replicated(required, timeout_s)
            if failed:
                codes = [failed.get((m[0], m[1]), code) if not code else code for m, code in zip(markers, codes)]
        return codes

    # -- the ISR -----------------------------------------------------------------------------------

    def _propose_isr(self, partition: Partition, isr: frozenset[int]) -> None:
        if self.isr_proposer is None or partition.isr_change_pending or isr == partition.isr:
            return
        partition.isr_change_pending = True
        self.isr_proposer(partition, isr)

    def shrink_isrs(self, max_lag_ms: int) -> None:
        """Propose removing the followers that have not caught up for ``max_lag_ms`` (run periodically)."""
        now = monotonic_ms()
        for partition in list(self._partitions.values()):
            lagging = partition.out_of_sync_replicas(now, max_lag_ms)
            if lagging:
                log.info("shrinking the ISR of %s-%d from %s: %s not caught up for %d ms", partition.topic,
                         partition.index, sorted(partition.isr), sorted(lagging), max_lag_ms)
                self._propose_isr(partition, partition.isr - lagging)

    async def wait_for_data(self, topic_partitions: Iterable[TopicPartition], timeout_s: float, *,
                            follower: bool = True) -> bool:
        """Wait until one of the partitions gets an append (a follower's fetch) or a higher high watermark (a
        consumer's), or the timeout passes; True if woken."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        watched = [p for tp in topic_partitions if (p := self._partitions.get(tp)) is not None]
        for partition in watched:
            partition.add_waiter(future, follower=follower)
        # A timer rather than asyncio.wait_for (a task per wait): the waiters' wake sets None, the timer False.
        timer = loop.call_later(timeout_s, _expire, future)
        try:
            return await future is None
        finally:
            timer.cancel()
            for partition in watched:
                partition.remove_waiter(future)


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(False)
