"""The high-level consumer's fetcher: one thread that keeps the owned partitions flowing into the streams.

Each round it sends one long-poll Fetch to every leader broker for all the partitions that broker leads
(all requests first, then the answers read, as the plain Consumer does) and puts each partition's
result, a chunk, on the queue of the stream that reads it; a full queue holds the fetcher back
(queued.max.message.chunks). A partition without a reachable leader (its broker is down) pauses alone
and is retried after refresh.leader.backoff.ms; the others go on. Positions start from the committed
offset or, without one, from auto.offset.reset (smallest/largest, looked up with ListOffsets), and an
out-of-range offset is reset the same way.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Iterable

from pipeline.client.cluster import Cluster
from pipeline.client.connection import BrokerConnection
from pipeline.client.consumer_stream import Chunk, PartitionTopicInfo
from pipeline.client.errors import KafkaClientError, KafkaConnectionError, OffsetOutOfRange
from pipeline.client.simple_consumer import (
    EARLIEST_TIME,
    LATEST_TIME,
    FetchRequest,
    MessageSet,
    MessageSizeTooLarge,
    fetch_request_body,
    list_offsets,
    partitions_by_key,
    read_message_set,
)
from pipeline.config import Config
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import KafkaProtocolError

__all__ = ["ConsumerFetcher"]

log = logging.getLogger(__name__)


class ConsumerFetcher:
    """Fetches the partitions given to ``assign`` from their leaders into their streams' queues."""

    def __init__(self, cluster: Cluster, config: Config, lock: threading.Lock, name: str = "consumer-fetcher") -> None:
        self._cluster = cluster
        self._lock = lock
        self._fetch_size = config["fetch.message.max.bytes"]
        self._max_fetch_size = config["fetch.max.bytes"]
        self._max_wait_ms = config["fetch.wait.max.ms"]
        self._min_bytes = config["fetch.min.bytes"]
        self._backoff_s = config["refresh.leader.backoff.ms"] / 1000
        self._reset = config["auto.offset.reset"]
        self._infos: list[PartitionTopicInfo] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def fetch_size(self) -> int:
        return self._fetch_size

    def start(self) -> None:
        self._thread.start()

    def assign(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Fetch these partitions from now on (the previous ones were deactivated by the caller)."""
        self._infos = list(infos)
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._cluster.close()

    # -- the loop ------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            infos = [i for i in self._infos if i.active]
            ready = [i for i in infos if i.retry_at <= now]
            if not ready:
                wait = min((i.retry_at for i in infos), default=now + 1.0) - now
                self._wake.wait(max(wait, 0.0))
                self._wake.clear()
                continue
            try:
                self._round(ready)
            except Exception as exc:
                # Not a broker or connection problem: tell the readers instead of dying silently.
                log.exception("consumer fetcher failed")
                for info in ready:
                    self._fail(info, exc)

    def _pause(self, info: PartitionTopicInfo) -> None:
        info.retry_at = time.monotonic() + self._backoff_s

    def _round(self, infos: list[PartitionTopicInfo]) -> None:
        by_leader: dict[int, list[PartitionTopicInfo]] = {}
        for info in infos:
            try:
                if info.fetch_offset is None:
                    self._resolve(info)
                leader = self._cluster.leader(info.topic, info.partition)
            except (KafkaConnectionError, KafkaProtocolError) as exc:
                log.debug("%s-%d paused: %s", info.topic, info.partition, exc)
                self._pause(info)
                continue
            if leader < 0:
                self._pause(info)
                continue
            by_leader.setdefault(leader, []).append(info)
        sent: list[tuple[int, BrokerConnection, list[PartitionTopicInfo], list[FetchRequest]]] = []
        for leader, group in by_leader.items():
            requests = [FetchRequest(i.topic, i.partition, i.fetch_offset, i.fetch_size)  # type: ignore[arg-type]
                        for i in group]
            body = fetch_request_body(requests, max_wait_ms=self._max_wait_ms, min_bytes=self._min_bytes,
                                      max_bytes=self._max_fetch_size)
            try:
                connection = self._cluster.connection(leader)
                connection.send(ApiKey.FETCH, body)
            except KafkaConnectionError as exc:
                log.debug("broker %d unreachable: %s", leader, exc)
                self._cluster.invalidate(leader)
                for info in group:
                    self._pause(info)
                continue
            sent.append((leader, connection, group, requests))
        try:
            for leader, connection, group, requests in sent:
                try:
                    parts = partitions_by_key(connection.receive()[1])
                except (KafkaConnectionError, KafkaProtocolError) as exc:
                    log.debug("fetch from broker %d failed: %s", leader, exc)
                    self._cluster.invalidate(leader)
                    for info in group:
                        self._pause(info)
                    continue
                for info, request in zip(group, requests):
                    key = (request.topic, request.partition)
                    self._take(info, read_message_set(request.topic, request.partition, request.offset,
                                                      parts.get(key)))
        finally:
            for _, connection, _, _ in sent:
                if connection.in_flight:
                    connection.close()

    def _resolve(self, info: PartitionTopicInfo) -> None:
        """Look up where a partition without a committed offset starts (auto.offset.reset)."""
        if self._reset == "none":
            raise KafkaClientError(f"{info.topic}-{info.partition} has no committed offset and "
                                   f"auto.offset.reset is none")
        when = EARLIEST_TIME if self._reset == "smallest" else LATEST_TIME
        connection = self._cluster.leader_connection(info.topic, info.partition)
        offsets = list_offsets(connection, info.topic, info.partition, when, 1)
        if not offsets:
            raise KafkaConnectionError(f"no offset for {info.topic}-{info.partition} at time {when}")
        with self._lock:
            info.fetch_offset = offsets[0]
            if info.consumed_offset is None:
                info.consumed_offset = offsets[0]

    def _take(self, info: PartitionTopicInfo, result: MessageSet) -> None:
        if not info.active:
            return
        error = result.error
        if error is not None:
            if isinstance(error, OffsetOutOfRange):
                self._out_of_range(info, error)
            elif isinstance(error, KafkaProtocolError) and error.retriable:
                self._cluster.invalidate()
                self._pause(info)
            else:
                self._fail(info, error)
            return
        if result.truncated:
            if info.fetch_size >= self._max_fetch_size:
                self._fail(info, MessageSizeTooLarge(info.topic, info.partition, result.offset, self._max_fetch_size))
            else:
                info.fetch_size = min(2 * info.fetch_size, self._max_fetch_size)
            return
        info.fetch_size = self._fetch_size
        if result.next_offset == result.offset:
            return
        info.fetch_offset = result.next_offset
        if result.batches:
            self._put(info, Chunk(info, iter(result)))

    def _out_of_range(self, info: PartitionTopicInfo, error: OffsetOutOfRange) -> None:
        if self._reset == "none":
            self._fail(info, error)
            return
        known = error.log_start_offset if self._reset == "smallest" else error.high_watermark
        log.warning("%s-%d: offset %d out of range, restarting from the %s offset", info.topic, info.partition,
                    error.offset, self._reset)
        info.fetch_offset = known if known >= 0 else None

    def _fail(self, info: PartitionTopicInfo, error: BaseException) -> None:
        """Stop fetching the partition and hand the error to its reader."""
        log.error("%s-%d: fetching stopped: %s", info.topic, info.partition, error)
        info.retry_at = float("inf")
        self._put(info, error)

    def _put(self, info: PartitionTopicInfo, item: object) -> None:
        while info.active and not self._stop.is_set():
            try:
                info.queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
