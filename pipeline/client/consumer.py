"""Consumer: follows a set of partitions from given offsets and blocks waiting for new messages.

It finds each partition's leader through :class:`pipeline.client.cluster.Cluster`, sends one long-poll
Fetch per leader for all the partitions that leader serves (sent to every leader first, then the
answers read), and yields the messages of every partition in turn. No offsets are stored: the caller
starts it at offsets (or "earliest"/"latest"), asks ``position()`` and may ``seek()``; the group
consumer on ZooKeeper builds on it. Leader moves and connection errors refresh the metadata and retry
after refresh.leader.backoff.ms; an out-of-range offset restarts per auto.offset.reset.

One thread uses a Consumer; ``close()`` may come from another thread and ends the iteration (a fetch
blocked in a long poll returns within fetch.wait.max.ms).
"""

from __future__ import annotations

import collections
import math
import threading
import time
from itertools import repeat
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.connection import BrokerConnection
from pipeline.client.consumer_config import ConsumerConfig
from pipeline.client.errors import KafkaConnectionError, OffsetOutOfRange
from pipeline.client.simple_consumer import (
    EARLIEST_TIME,
    LATEST_TIME,
    FetchRequest,
    MessageSet,
    MessageSizeTooLarge,
    batch_records,
    fetch_request_body,
    list_offsets,
    partitions_by_key,
    read_message_set,
)
from pipeline.config import Config
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = ["Consumer", "ConsumerRecord", "TopicPartition"]

TopicPartition = tuple[str, int]

_START_TIMES = {"earliest": EARLIEST_TIME, "smallest": EARLIEST_TIME, "latest": LATEST_TIME, "largest": LATEST_TIME}


class ConsumerRecord(NamedTuple):
    """A consumed message: where it came from and what it holds."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


_new_tuple = tuple.__new__


class _Chunk:
    """One partition's fetched batches being handed out, one decoded batch at a time.

    ``records`` is the current batch (as ConsumerRecords) and ``iterator`` walks it; a list iterator
    resumes where it stopped, so an iteration the caller abandons loses nothing. ``start`` is the
    partition's position before the current batch.
    """

    __slots__ = ("tp", "data", "batches", "index", "offset", "next_offset", "records", "iterator", "start")

    def __init__(self, tp: TopicPartition, result: MessageSet) -> None:
        self.tp = tp
        self.data = result.data
        self.batches = result.batches
        self.index = 0
        self.offset = result.offset
        self.next_offset = result.next_offset
        self.records: list[ConsumerRecord] = []
        self.iterator: Iterator[ConsumerRecord] = iter(self.records)
        self.start = result.offset

    def advance(self) -> bool:
        """Decode the next batch into ``records``; False when none is left."""
        if self.index >= len(self.batches):
            return False
        if self.records:
            self.start = self.records[-1].offset + 1
        pos, header = self.batches[self.index]
        self.index += 1
        records = batch_records(self.data, pos, header, self.offset)
        self.records = list(map(_new_tuple, repeat(ConsumerRecord), map(self.tp.__add__, records)))
        self.iterator = iter(self.records)
        return True

    def position(self) -> int:
        """The offset after the last record handed out."""
        done = len(self.records) - self.iterator.__length_hint__()
        return self.records[done - 1].offset + 1 if done else self.start


class Consumer:
    """Iterate to get :class:`ConsumerRecord` items from all assigned partitions, blocking for new data.

    ``config`` is a dict of properties (see pipeline.client.consumer_config), a properties file path or
    a ConsumerConfig. Give ``partitions`` as {(topic, partition): offset | "earliest" | "latest"}, or
    ``topics`` to follow every partition of those topics from where auto.offset.reset says.
    Iteration ends after consumer.timeout.ms without a message (never, with -1) or on ``close()``.
    """

    def __init__(self, config: Mapping[str, Any] | Config | str | None = None, *,
                 partitions: Mapping[TopicPartition, int | str] | None = None,
                 topics: Iterable[str] | None = None, cluster: Cluster | None = None) -> None:
        self.config = config if isinstance(config, ConsumerConfig) else ConsumerConfig(config)
        if (partitions is None) == (topics is None):
            raise ValueError("give either partitions or topics")
        self._cluster = cluster if cluster is not None else Cluster(
            StaticBrokerList(self.config["metadata.broker.list"]), client_id=self.config["client.id"],
            timeout_s=self.config["socket.timeout.ms"] / 1000,
            metadata_max_age_s=self.config["topic.metadata.refresh.interval.ms"] / 1000)
        self._fetch_size = self.config["fetch.message.max.bytes"]
        self._max_fetch_size = self.config["fetch.max.bytes"]
        self._min_bytes = self.config["fetch.min.bytes"]
        self._backoff_s = self.config["refresh.leader.backoff.ms"] / 1000
        self._reset = self.config["auto.offset.reset"]
        # Where the next fetch of each partition starts, and the next offset handed to the caller
        # (behind the fetch offset while fetched messages wait in _ready).
        self._fetch_offsets: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}
        # Partitions whose offset must first be looked up with ListOffsets at this time (-1, -2).
        self._pending: dict[TopicPartition, int] = {}
        self._sizes: dict[TopicPartition, int] = {}
        self._ready: collections.deque[_Chunk] = collections.deque()
        self._topics = list(topics) if topics is not None else []
        self._closed = threading.Event()
        for (topic, partition), start in (partitions or {}).items():
            self._assign((topic, partition), start)

    # -- assignment and offsets -------------------------------------------------------------------

    def _assign(self, tp: TopicPartition, start: int | str) -> None:
        self._sizes[tp] = self._fetch_size
        if isinstance(start, str):
            if start not in _START_TIMES:
                raise ValueError(f"start of {tp[0]}-{tp[1]} must be an offset, 'earliest' or 'latest', got {start!r}")
            self._pending[tp] = _START_TIMES[start]
        elif start < 0:
            raise ValueError(f"start offset of {tp[0]}-{tp[1]} must not be negative, got {start}")
        else:
            self._fetch_offsets[tp] = self._positions[tp] = start

    def _assign_topics(self) -> None:
        for topic in self._topics:
            for partition in self._cluster.partitions_for(topic):
                if (topic, partition) not in self._sizes:
                    self._assign((topic, partition), self._reset if self._reset != "none" else "latest")
        self._topics = []

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer follows."""
        if self._topics:
            self._assign_topics()
        return list(self._sizes)

    def _resolve_pending(self) -> None:
        for tp, when in list(self._pending.items()):
            offsets = list_offsets(self._cluster.leader_connection(*tp), tp[0], tp[1], when, 1)
            if not offsets:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                         f"the broker returned no offset for {tp[0]}-{tp[1]} at time {when}")
            self._fetch_offsets[tp] = self._positions[tp] = offsets[0]
            del self._pending[tp]

    def position(self, topic: str, partition: int) -> int:
        """The offset of the next message this consumer returns for ``topic``-``partition``."""
        tp = (topic, partition)
        if tp not in self._sizes:
            self.assignment()
            if tp not in self._sizes:
                raise ValueError(f"{topic}-{partition} is not assigned to this consumer")
        if self._ready and self._ready[0].tp == tp:
            return self._ready[0].position()
        if tp in self._pending:
            self._resolve_pending()
        return self._positions[tp]

    def seek(self, topic: str, partition: int, offset: int | str) -> None:
        """Continue ``topic``-``partition`` from ``offset`` (or "earliest"/"latest"); drops fetched messages."""
        tp = (topic, partition)
        if tp not in self.assignment():
            raise ValueError(f"{topic}-{partition} is not assigned to this consumer")
        for chunk in self._ready:
            if chunk.tp == tp:
                # Emptying the list ends an iteration handing it out; the chunk then leaves the queue.
                chunk.records.clear()
        kept = [chunk for chunk in self._ready if chunk.tp != tp]
        self._ready.clear()
        self._ready.extend(kept)
        self._pending.pop(tp, None)
        self._fetch_offsets.pop(tp, None)
        self._positions.pop(tp, None)
        self._assign(tp, offset)

    # -- iteration ----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ConsumerRecord]:
        timeout_ms = self.config["consumer.timeout.ms"]
        max_wait_ms = self.config["fetch.wait.max.ms"]
        last_message = time.monotonic()
        ready = self._ready
        while not self._closed.is_set():
            if ready:
                chunk = ready[0]
                yield from chunk.iterator
                if ready and ready[0] is chunk:
                    if chunk.records:
                        last_message = time.monotonic()
                    if not chunk.advance():
                        ready.popleft()
                        self._positions[chunk.tp] = chunk.next_offset
                continue
            wait_ms = max_wait_ms
            if timeout_ms >= 0:
                left_s = last_message + timeout_ms / 1000 - time.monotonic()
                if left_s <= 0:
                    return
                wait_ms = min(wait_ms, math.ceil(left_s * 1000))
            self._fetch_round(wait_ms)
        # A close() from another thread may race with a metadata refresh that reconnected.
        self._cluster.close()

    def _fetch_round(self, max_wait_ms: int) -> None:
        """One long-poll Fetch per leader for all partitions; queue what came back."""
        try:
            if self._topics:
                self._assign_topics()
            if self._pending:
                self._resolve_pending()
            by_leader: dict[int, list[FetchRequest]] = {}
            for tp, offset in self._fetch_offsets.items():
                leader = self._cluster.leader(*tp)
                if leader < 0:
                    raise KafkaProtocolError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp[0]}-{tp[1]} has no leader now")
                by_leader.setdefault(leader, []).append(FetchRequest(tp[0], tp[1], offset, self._sizes[tp]))
        except (KafkaConnectionError, KafkaProtocolError) as exc:
            self._retry_later(exc)
            return
        if not by_leader:
            # Nothing assigned: wait like an empty long poll instead of spinning.
            self._closed.wait(max_wait_ms / 1000)
            return
        sent: list[tuple[int, BrokerConnection, list[FetchRequest]]] = []
        failed: Exception | None = None
        for leader, requests in by_leader.items():
            body = fetch_request_body(requests, max_wait_ms=max_wait_ms, min_bytes=self._min_bytes,
                                      max_bytes=self._max_fetch_size)
            try:
                connection = self._cluster.connection(leader)
                connection.send(ApiKey.FETCH, body)
            except KafkaConnectionError as exc:
                self._cluster.invalidate(leader)
                failed = exc
                continue
            sent.append((leader, connection, requests))
        try:
            for leader, connection, requests in sent:
                try:
                    response = connection.receive()[1]
                except KafkaConnectionError as exc:
                    self._cluster.invalidate(leader)
                    failed = exc
                    continue
                parts = partitions_by_key(response)
                for request in requests:
                    tp = (request.topic, request.partition)
                    failure = self._take(tp, read_message_set(request.topic, request.partition, request.offset,
                                                              parts.get(tp)))
                    failed = failure or failed
        except BaseException:
            # Responses still unread would desynchronise these connections: drop them.
            for _, connection, _ in sent:
                if connection.in_flight:
                    connection.close()
            raise
        if failed is not None:
            self._retry_later(failed)

    def _take(self, tp: TopicPartition, result: MessageSet) -> Exception | None:
        """Queue one partition's messages or deal with its error; return an error worth a retry."""
        error = result.error
        if error is not None:
            if isinstance(error, OffsetOutOfRange):
                self._out_of_range(tp, error)
                return None
            if isinstance(error, KafkaProtocolError) and error.retriable:
                return error
            raise error
        if result.truncated:
            size = self._sizes[tp]
            if size >= self._max_fetch_size:
                raise MessageSizeTooLarge(tp[0], tp[1], result.offset, self._max_fetch_size)
            self._sizes[tp] = min(2 * size, self._max_fetch_size)
            return None
        self._sizes[tp] = self._fetch_size
        if result.next_offset == result.offset:
            return None
        self._fetch_offsets[tp] = result.next_offset
        self._ready.append(_Chunk(tp, result))
        return None

    def _out_of_range(self, tp: TopicPartition, error: OffsetOutOfRange) -> None:
        if self._reset == "none":
            raise error
        if self._reset == "smallest":
            known, when = error.log_start_offset, EARLIEST_TIME
        else:
            known, when = error.high_watermark, LATEST_TIME
        if known >= 0:
            self._fetch_offsets[tp] = self._positions[tp] = known
        else:
            self._fetch_offsets.pop(tp, None)
            self._pending[tp] = when

    def _retry_later(self, error: Exception) -> None:
        """After a leader move or a broken connection: forget the metadata and back off."""
        if isinstance(error, KafkaProtocolError) and not error.retriable:
            raise error
        self._cluster.invalidate()
        self._closed.wait(self._backoff_s)

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop: the iteration ends and the connections close."""
        self._closed.set()
        self._cluster.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
