"""The async producer's in-memory queue: messages grouped per topic-partition into batches.

Callers ``append`` the messages of one ProducerData (already partitioned and encoded); the background
sender ``drain``\\ s the batches that are ready: full (``batch.size`` messages), older than ``queue.time``,
or everything once the producer flushes or closes. The queue holds at most ``queue.buffering.max.messages``
messages, counted until the sender ``release``\\ s them after sending; a caller finding it full blocks,
waits ``queue.enqueue.timeout.ms`` then raises, or raises at once, as configured.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from pipeline.client.errors import KafkaClientError
from pipeline.records import now_ms

__all__ = ["NodeOf", "QueueFullError", "PendingBatch", "RecordAccumulator"]

#: A partition's leader broker id, as the sender last routed it (None when it does not know it yet).
NodeOf = Callable[[str, int], "int | None"]


class QueueFullError(KafkaClientError):
    """The async producer's queue stayed full for queue.enqueue.timeout.ms; the messages were not queued."""


class PendingBatch:
    """Messages waiting for one topic-partition: encoded keys and values, the original messages, and their
    timestamps and headers -- each None while no message of the batch came with them."""

    __slots__ = ("topic", "partition", "keys", "values", "messages", "timestamps", "headers", "created")

    def __init__(self, topic: str, partition: int, created: float) -> None:
        self.topic = topic
        self.partition = partition
        self.keys: list = []
        self.values: list = []
        self.messages: list = []
        self.timestamps: list[int] | None = None
        self.headers: list | None = None
        self.created = created

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"PendingBatch({self.topic}-{self.partition}, {len(self.values)} messages)"

    def add(self, keys: list, values: list, messages: list, timestamps: list[int] | None,
            headers: list | None) -> None:
        """Append messages (one key each), with or without timestamps and headers. Once one message has a
        timestamp, the others get the time they were queued (Kafka stamps a record when send() is called);
        messages without headers get None."""
        n = len(values)
        if timestamps is not None or self.timestamps is not None:
            if self.timestamps is None:
                self.timestamps = [now_ms()] * len(self.values)
            self.timestamps += [now_ms()] * n if timestamps is None else timestamps
        if headers is not None or self.headers is not None:
            if self.headers is None:
                self.headers = [None] * len(self.values)
            self.headers += [None] * n if headers is None else headers
        self.values += values
        self.keys += keys
        self.messages += messages


class RecordAccumulator:
    """Bounded, thread-safe batching queue between send() callers and the sender thread."""

    def __init__(self, batch_size: int, linger_s: float, max_messages: int, enqueue_timeout_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.max_messages = max_messages
        self.enqueue_timeout_ms = enqueue_timeout_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)   # callers wait here for room
        self._work = threading.Condition(self._lock)    # the sender waits here for batches
        self._open: dict[tuple[str, int], PendingBatch] = {}
        self._full: list[PendingBatch] = []
        self._queued = 0        # messages appended and not yet released
        self._flushing = 0
        self.closed = False

    @property
    def queued(self) -> int:
        """Messages in the queue or being sent."""
        return self._queued

    def append(self, topic: str, partition: int, key: bytes | None, values: list, messages: list,
               timestamps: list[int] | None = None, headers: list | None = None) -> None:
        """Queue the messages of one ProducerData (all with the same key) for ``topic``-``partition``,
        with their timestamps and headers if they have them."""
        self.append_all(topic, partition, [key] * len(values), values, messages, timestamps, headers)

    def append_all(self, topic: str, partition: int, keys: list, values: list, messages: list,
                   timestamps: list[int] | None = None, headers: list | None = None) -> None:
        """Queue messages for ``topic``-``partition``, one key each, with their timestamps and headers if they
        have them, under one take of the lock."""
        n = len(values)
        with self._lock:
            if self._queued + n > self.max_messages or self.closed:
                if self.closed:
                    raise KafkaClientError("the producer is closed")
                self._wait_for_room(n)
            self._queued += n
            batch = self._open.get((topic, partition))
            if batch is None:
                batch = self._open[(topic, partition)] = PendingBatch(topic, partition, self._clock())
                self._work.notify()
            room = self.batch_size - len(batch.values)
            plain = timestamps is None and headers is None
            if n < room:
                if plain and batch.timestamps is None and batch.headers is None:
                    batch.values += values
                    batch.keys += keys
                    batch.messages += messages
                else:
                    batch.add(keys, values, messages, timestamps, headers)
                return
            start = 0
            while start < n:
                end = start + min(room, n - start)
                batch.add(keys[start:end], values[start:end], messages[start:end],
                          None if timestamps is None else timestamps[start:end],
                          None if headers is None else headers[start:end])
                start = end
                if len(batch.values) >= self.batch_size:
                    self._full.append(batch)
                    batch = PendingBatch(topic, partition, self._clock())
                    room = self.batch_size
            if batch.values:
                self._open[(topic, partition)] = batch
            else:
                del self._open[(topic, partition)]
            self._work.notify()

    def _wait_for_room(self, n: int) -> None:
        if n > self.max_messages:
            raise QueueFullError(f"{n} messages can never fit a queue of {self.max_messages} "
                                 "(queue.buffering.max.messages)")
        timeout_ms = self.enqueue_timeout_ms
        if timeout_ms == 0:
            raise QueueFullError(f"the queue holds {self._queued} of {self.max_messages} messages")
        deadline = None if timeout_ms < 0 else self._clock() + timeout_ms / 1000.0
        while self._queued + n > self.max_messages:
            if self.closed:
                raise KafkaClientError("the producer was closed while waiting for room in its queue")
            if deadline is None:
                self._space.wait()
            else:
                left = deadline - self._clock()
                if left <= 0:
                    raise QueueFullError(f"the queue stayed full ({self._queued} of {self.max_messages} messages) "
                                         f"for {timeout_ms} ms")
                self._space.wait(left)

    def drain(self, now: float | None = None, node_of: NodeOf | None = None) -> list[PendingBatch]:
        """Take every batch that is ready now: full, lingered long enough, or all when flushing/closing; with
        ``node_of`` (a partition's leader broker, None when unknown), also every open batch for a broker that
        one of those goes to (Kafka's drain: a broker with something to send is sent all it has queued)."""
        with self._lock:
            return self._drain_locked(self._clock() if now is None else now, node_of)

    def _drain_locked(self, now: float, node_of: NodeOf | None = None) -> list[PendingBatch]:
        ready = self._full
        self._full = []
        everything = self.closed or self._flushing > 0
        expired = [key for key, batch in self._open.items() if everything or now - batch.created >= self.linger_s]
        if node_of is not None and (expired or ready) and len(expired) < len(self._open):
            nodes = {node_of(*key) for key in expired}
            nodes.update(node_of(batch.topic, batch.partition) for batch in ready)
            nodes.discard(None)
            if nodes:
                due = set(expired)
                expired += [key for key in self._open if key not in due and node_of(*key) in nodes]
        for key in expired:
            ready.append(self._open.pop(key))
        return ready

    def next_deadline(self) -> float | None:
        """When the oldest open batch has lingered long enough (None when nothing is open)."""
        with self._lock:
            if not self._open:
                return None
            return min(batch.created for batch in self._open.values()) + self.linger_s

    def wait_for_batches(self, max_wait_s: float, node_of: NodeOf | None = None) -> list[PendingBatch]:
        """The sender's wait: block until a batch is ready (or ``max_wait_s`` passes), then drain (see drain)."""
        with self._lock:
            deadline = self._clock() + max_wait_s
            while True:
                now = self._clock()
                ready = self._drain_locked(now, node_of)
                if ready or self.closed:
                    return ready
                wake = deadline
                if self._open:
                    wake = min(wake, min(b.created for b in self._open.values()) + self.linger_s)
                if wake <= now:
                    return ready
                self._work.wait(wake - now)

    def release(self, n: int) -> None:
        """The sender is done with ``n`` messages (sent or reported failed): make room for callers."""
        with self._lock:
            self._queued -= n
            self._space.notify_all()

    def begin_flush(self) -> None:
        """Make every open batch ready regardless of queue.time, until end_flush()."""
        with self._lock:
            self._flushing += 1
            self._work.notify()

    def end_flush(self) -> None:
        with self._lock:
            self._flushing -= 1

    def wait_empty(self, timeout_s: float | None) -> bool:
        """Wait until every queued message was released; False if ``timeout_s`` passed first."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._lock:
            while self._queued > 0:
                if deadline is None:
                    self._space.wait()
                else:
                    left = deadline - self._clock()
                    if left <= 0:
                        return False
                    self._space.wait(left)
            return True

    def close(self) -> None:
        """Refuse new messages; the sender drains what is left without waiting for queue.time."""
        with self._lock:
            self.closed = True
            self._work.notify_all()
            self._space.notify_all()

    def abort(self) -> list[PendingBatch]:
        """Take everything still queued (for a close that timed out: report it as not sent)."""
        with self._lock:
            self.closed = True
            ready = self._drain_locked(self._clock())
            # The caller reports these itself: they leave the queue now, not when a sender releases them.
            self._queued -= sum(len(batch) for batch in ready)
            self._work.notify_all()
            self._space.notify_all()
            return ready
