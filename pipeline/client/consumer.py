"""Consumer: follows a set of partitions from given offsets and blocks waiting for new messages.

It finds each partition's leader through :class:`pipeline.client.cluster.Cluster`, sends one long-poll
Fetch per leader for all the partitions that leader serves (sent to every leader first, then the
answers read), and yields the messages of every partition in turn. No offsets are stored: the caller
starts it at offsets (or "earliest"/"latest"), asks ``position()`` and may ``seek()``. Fetching goes
through the same :class:`~pipeline.client.partition_fetcher.PartitionFetcher` and fetch state machine
as the group consumer's fetcher: a partition without a leader, or whose leader fails, pauses alone for
refresh.leader.backoff.ms while the others go on; an out-of-range offset restarts per auto.offset.reset.

One thread uses a Consumer; ``close()`` may come from another thread and ends the iteration (a fetch
blocked in a long poll returns within fetch.wait.max.ms). Such a close leaves the connections of a fetch in
progress to the iterating thread, which closes them when that fetch ends: a socket closed under a thread
reading from it would break that read (or, its descriptor reused, feed it another socket's bytes).
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from itertools import repeat
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.consumer_config import ConsumerConfig
from pipeline.client.errors import KafkaConnectionError
from pipeline.client.fetch_state import FetchPosition, FetchStateMachine
from pipeline.client.partition_fetcher import PartitionFetcher
from pipeline.client.simple_consumer import EARLIEST_TIME, LATEST_TIME, MessageSet, batch_records
from pipeline.config import Config
from pipeline.protocol.errors import KafkaProtocolError

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
            metadata_max_age_s=self.config["topic.metadata.refresh.interval.ms"] / 1000,
            security=self.config.security)
        self._reset = self.config["auto.offset.reset"]
        self._machine = FetchStateMachine.from_config(self.config)
        self._fetcher: PartitionFetcher[FetchPosition] = PartitionFetcher(
            self._cluster, self._machine, min_bytes=self.config["fetch.min.bytes"],
            max_bytes=self.config["fetch.max.bytes"], deliver=self._deliver, fail=self._fail,
            isolation_level=self.config["isolation.level"])
        # Each partition's fetch state; its next offset to hand out is that of its chunk in _ready, if any.
        self._fetch: dict[TopicPartition, FetchPosition] = {}
        self._ready: collections.deque[_Chunk] = collections.deque()
        self._failures: list[BaseException] = []
        self._topics = list(topics) if topics is not None else []
        self._closed = threading.Event()
        # Whether the iterating thread is using the connections; guards the hand-over of closing them.
        self._io_lock = threading.Lock()
        self._in_io = False
        for (topic, partition), start in (partitions or {}).items():
            self._assign((topic, partition), start)

    # -- assignment and offsets -------------------------------------------------------------------

    def _assign(self, tp: TopicPartition, start: int | str) -> None:
        if isinstance(start, str):
            if start not in _START_TIMES:
                raise ValueError(f"start of {tp[0]}-{tp[1]} must be an offset, 'earliest' or 'latest', got {start!r}")
            self._fetch[tp] = FetchPosition(tp[0], tp[1], None, self._machine.fetch_size, _START_TIMES[start])
        elif start < 0:
            raise ValueError(f"start offset of {tp[0]}-{tp[1]} must not be negative, got {start}")
        else:
            self._fetch[tp] = FetchPosition(tp[0], tp[1], start, self._machine.fetch_size)

    def _assign_topics(self) -> None:
        for topic in self._topics:
            for partition in self._cluster.partitions_for(topic):
                if (topic, partition) not in self._fetch:
                    self._assign((topic, partition), self._reset if self._reset != "none" else "latest")
        self._topics = []

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer follows."""
        if self._topics:
            self._assign_topics()
        return list(self._fetch)

    def position(self, topic: str, partition: int) -> int:
        """The offset of the next message this consumer returns for ``topic``-``partition``."""
        tp = (topic, partition)
        if tp not in self._fetch:
            self.assignment()
            if tp not in self._fetch:
                raise ValueError(f"{topic}-{partition} is not assigned to this consumer")
        for chunk in self._ready:
            if chunk.tp == tp:
                return chunk.position()
        # Nothing of it waits to be handed out: the next fetch starts at the next message.
        fetch = self._fetch[tp]
        if fetch.fetch_offset is None:
            with self._using_connections():
                self._fetcher.look_up_start(fetch)
        return fetch.fetch_offset  # type: ignore[return-value]

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
                continue
            wait_ms = max_wait_ms
            if timeout_ms >= 0:
                left_s = last_message + timeout_ms / 1000 - time.monotonic()
                if left_s <= 0:
                    return
                wait_ms = min(wait_ms, math.ceil(left_s * 1000))
            with self._using_connections():
                self._fetch_round(wait_ms)
        # A close() from another thread may race with a metadata refresh that reconnected.
        self._cluster.close()

    def _fetch_round(self, max_wait_ms: int) -> None:
        """One long-poll Fetch per leader for every partition not paused; queue what came back."""
        if self._topics:
            try:
                self._assign_topics()
            except (KafkaConnectionError, KafkaProtocolError) as exc:
                self._retry_later(exc)
                return
        ready, wake = self._machine.ready(self._fetch.values())
        if not ready:
            # Nothing assigned, or every partition paused: wait like an empty long poll, not spinning.
            wait_s = max_wait_ms / 1000
            if wake is not None:
                wait_s = min(wait_s, max(wake - self._machine.clock(), 0.0))
            self._closed.wait(wait_s)
            return
        self._fetcher.fetch_round(ready, max_wait_ms)
        if self._failures:
            error = self._failures[0]
            self._failures.clear()
            raise error

    def _deliver(self, position: FetchPosition, result: MessageSet) -> None:
        self._ready.append(_Chunk((position.topic, position.partition), result))

    def _fail(self, position: FetchPosition, error: BaseException) -> None:
        # Raised to the iterating caller once the round's answers are all read; the partition stays
        # where it was, so iterating again tries it again.
        self._failures.append(error)

    def _retry_later(self, error: Exception) -> None:
        """After a leader move or a broken connection: forget the metadata and back off."""
        if isinstance(error, KafkaProtocolError) and not error.retriable:
            raise error
        self._cluster.invalidate()
        self._closed.wait(self._machine.backoff_s)

    # -- lifecycle ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _using_connections(self) -> Iterator[None]:
        """The iterating thread's I/O: a close() meanwhile leaves the connections to it, closed when the I/O ends."""
        with self._io_lock:
            self._in_io = True
        try:
            yield
        finally:
            with self._io_lock:
                self._in_io = False
                closing = self._closed.is_set()
            if closing:
                self._cluster.close()

    def close(self) -> None:
        """Stop: the iteration ends and the connections close (those of a fetch in progress when it ends)."""
        with self._io_lock:
            self._closed.set()
            if self._in_io:
                return
        self._cluster.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
