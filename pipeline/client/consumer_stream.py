"""The streams of the high-level consumer: blocking iterators over the chunks a fetcher queues for them.

A :class:`PartitionTopicInfo` is one owned partition (Kafka's name): where its next fetch starts, the
offset after the last message the application is done with (``consumed_offset``, what a commit writes)
and the queue of the stream that reads it. A :class:`KafkaStream` hands out the records of the chunks in
its queue. A record counts as consumed only once the application asks the stream for the next record
(or calls ``acknowledge()``): until then it may still be in processing, so a commit -- automatic, on a
rebalance or on shutdown -- leaves it to be delivered again (at least once). When a rebalance takes a
partition away its info is deactivated under the shared lock, and the stream drops whatever of it is
still buffered, so nothing is handed out after the offsets were committed for the next owner.
"""

from __future__ import annotations

import queue
import threading
import time
from itertools import repeat
from typing import Iterator

from pipeline.client.consumer import ConsumerRecord
from pipeline.client.errors import KafkaClientError
from pipeline.client.fetch_state import FetchPosition
from pipeline.records import Record

__all__ = ["ConsumerTimeout", "KafkaStream", "PartitionTopicInfo"]

_SHUTDOWN = object()
_new_tuple = tuple.__new__


class ConsumerTimeout(KafkaClientError):
    """No message arrived within consumer.timeout.ms; the stream may be iterated again afterwards."""


class PartitionTopicInfo(FetchPosition):
    """One partition a consumer owns: fetch state, consumed and committed offsets, its stream's queue."""

    __slots__ = ("queue", "consumed_offset", "committed_offset", "active")

    def __init__(self, topic: str, partition: int, chunks: "queue.Queue[object]", offset: int | None,
                 fetch_size: int) -> None:
        # A None offset (nothing committed) is looked up per auto.offset.reset by the fetcher.
        super().__init__(topic, partition, offset, fetch_size)
        self.queue = chunks
        self.consumed_offset = offset
        self.committed_offset = offset
        self.active = True

    def __repr__(self) -> str:
        return (f"PartitionTopicInfo({self.topic}-{self.partition}, fetch={self.fetch_offset}, "
                f"consumed={self.consumed_offset}, committed={self.committed_offset}, active={self.active})")


class Chunk:
    """One fetch result of one partition, handed out one decoded record batch at a time.

    ``records`` is the current record batch as ConsumerRecords and ``taken`` how many of them were handed out;
    ``batches`` yields the next record batches' records (decoded when asked for).
    """

    __slots__ = ("info", "batches", "records", "taken", "end")

    def __init__(self, info: PartitionTopicInfo, batches: Iterator[list[Record]], end: int | None = None) -> None:
        self.info = info
        self.batches = batches
        self.records: list[ConsumerRecord] = []
        self.taken = 0
        #: The offset after the fetch: past its last record, and past the control batches and aborted
        #: transactions a read_committed fetch left out after it.
        self.end = end

    def advance(self) -> bool:
        """Decode the next record batch into ``records``; False when none is left."""
        for records in self.batches:
            if records:
                tp = (self.info.topic, self.info.partition)
                self.records = list(map(_new_tuple, repeat(ConsumerRecord), map(tp.__add__, records)))
                self.taken = 0
                return True
        self.records = []
        self.taken = 0
        return False


class KafkaStream:
    """A blocking iterator of :class:`ConsumerRecord` (topic, partition, offset, timestamp, key, value, headers).

    ``next()`` waits for the next message; after consumer.timeout.ms without one it raises
    :class:`ConsumerTimeout` (the stream stays usable), and once the connector shut down it raises
    StopIteration, ending a ``for`` loop. With ``acknowledge_on_next=False`` neither ``next()`` nor
    ``acknowledge()`` marks anything consumed: the connector's ``commit_offsets(offsets)`` does.
    """

    def __init__(self, name: str, lock: threading.Lock, max_chunks: int, timeout_ms: int, *,
                 acknowledge_on_next: bool = True) -> None:
        self.name = name
        self._acknowledge_on_next = acknowledge_on_next
        self.queue: queue.Queue[object] = queue.Queue(max_chunks)
        self._lock = lock
        self._timeout_ms = timeout_ms
        self._chunk: Chunk | None = None
        self._stopped = False
        # The partition and offset after the record handed out last, until the application is done with it.
        self._unacked: PartitionTopicInfo | None = None
        self._unacked_offset = 0
        #: (topic, partition) -> the offset after a fetch whose records were all handed out, when it lies past the
        #: last of them (control batches, aborted transactions): what a reader that keeps its own positions may
        #: move to once it is done with those records (take_passed).
        self.passed: dict[tuple[str, int], int] = {}

    def __iter__(self) -> "KafkaStream":
        return self

    def acknowledge(self) -> None:
        """Mark the record handed out last as processed: the next commit includes it.

        Asking for the next record does the same; call this after the last record you process before a
        shutdown, or it is delivered again to whoever owns its partition next.
        """
        info = self._unacked
        if info is not None:
            self._unacked = None
            # A plain store: commits read it under the lock, and an acknowledgement racing a commit is
            # simply in the next one (or, after a rebalance, delivered again -- never lost).
            info.consumed_offset = self._unacked_offset

    def __next__(self) -> ConsumerRecord:
        chunk = self._chunk
        if chunk is not None:
            # The common case inline: the next record of the record batch being handed out.
            taken = chunk.taken
            records = chunk.records
            if taken < len(records):
                if self._unacked is not None:
                    self.acknowledge()
                info = chunk.info
                with self._lock:
                    if info.active:
                        chunk.taken = taken + 1
                        record = records[taken]
                        if self._acknowledge_on_next:
                            self._unacked = info
                            self._unacked_offset = record.offset + 1
                        return record
        return self._take(1)[0]

    def next_batch(self) -> list[ConsumerRecord]:
        """The next records of one partition, in offset order: what is left of the record batch the stream is
        handing out (at least one record). Waits, times out and ends as ``next()`` does; the records count
        as consumed once the next ``next()`` / ``next_batch()`` (or ``acknowledge()``) is called, as a
        record handed out by ``next()`` does."""
        return self._take(0)

    def _take(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` records (0: all that are left of the current record batch) of one partition."""
        if self._unacked is not None:
            self.acknowledge()
        deadline = None if self._timeout_ms < 0 else time.monotonic() + self._timeout_ms / 1000
        while True:
            chunk = self._chunk
            if chunk is not None:
                records = chunk.records
                taken = chunk.taken
                if taken < len(records) or chunk.advance():
                    records = chunk.records
                    taken = chunk.taken
                    stop = len(records) if limit == 0 else min(taken + limit, len(records))
                    info = chunk.info
                    with self._lock:
                        if info.active:
                            chunk.taken = stop
                            out = records[taken:stop] if taken or stop < len(records) else records
                            if self._acknowledge_on_next:
                                self._unacked = info
                                self._unacked_offset = out[-1].offset + 1
                            return out
                if chunk.end is not None:
                    self._passed(chunk)
                self._chunk = None
            if self._stopped:
                raise StopIteration
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise ConsumerTimeout(f"no message on stream {self.name} within {self._timeout_ms} ms")
            try:
                item = self.queue.get(timeout=wait)
            except queue.Empty:
                raise ConsumerTimeout(f"no message on stream {self.name} within {self._timeout_ms} ms") from None
            if item is _SHUTDOWN:
                self._stopped = True
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, Chunk)
            self._chunk = item

    def _passed(self, chunk: Chunk) -> None:
        """Every record of ``chunk`` was handed out and (the caller asked for the next) is done with: its partition
        is consumed up to the fetch's end, past what read_committed left out."""
        info = chunk.info
        with self._lock:
            if not info.active:
                return
            self.passed[(info.topic, info.partition)] = chunk.end  # type: ignore[assignment]
            if self._acknowledge_on_next and (info.consumed_offset is None or info.consumed_offset < chunk.end):
                info.consumed_offset = chunk.end

    def take_passed(self) -> dict[tuple[str, int], int]:
        """The positions ``passed`` since the last call (and forget them)."""
        passed, self.passed = self.passed, {}
        return passed

    def clear(self) -> None:
        """Drop the queued chunks (a rebalance: their partitions may belong to someone else now)."""
        shut = False
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            shut = shut or item is _SHUTDOWN
        if shut:
            self.queue.put(_SHUTDOWN)

    def shutdown(self) -> None:
        """End the iteration: the reader gets StopIteration once it reaches this point."""
        while True:
            self.clear()
            try:
                self.queue.put_nowait(_SHUTDOWN)
                return
            except queue.Full:
                continue

    def __repr__(self) -> str:
        return f"KafkaStream({self.name})"
