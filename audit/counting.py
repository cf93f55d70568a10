"""Counting for every tier of the audit (the paper's section 5): what each host had acknowledged, per topic
and window of event time, and the thread that publishes those counts.

Every event is counted under its server, its topic and the fixed window its `header.eventTime` falls
in: in flight when handed to the producer, then acknowledged (with its encoded size) or failed. A window
closes once the clock has passed its end and none of its events is still in flight; `close_windows`
then returns one AuditCount record per (server, topic, window) with the acknowledged count and bytes,
the failures counted apart in `properties` (`failed`, `failedBytes`) and never as acknowledged, and, when
the tier knows its events' ids, the sketch of the acknowledged ids (:mod:`audit.sketch`) that lets the audit
name the events two tiers disagree on.
`AuditPublisher` sends those records to the audit topic, retrying until the broker takes them. The
frontend emulators count as tier `producer`, the mirror as tier `mirror`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from typing import Any, Mapping, Sequence

from prometheus_client import Counter

from audit.latency import LatencyBuckets
from audit.sketch import EventSketch
from pipeline.client import Producer, ProducerData
from pipeline.client.errors import KafkaClientError
from pipeline.protocol.errors import KafkaProtocolError
from schemas.events import AUDIT_NAME, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder

__all__ = ["AuditCounter", "AuditPublisher", "PRODUCER_TIER"]

log = logging.getLogger(__name__)

PRODUCER_TIER = "producer"


class _Window:
    __slots__ = ("in_flight", "count", "bytes", "failed", "failed_bytes", "sketch", "latency")

    def __init__(self) -> None:
        self.in_flight = self.count = self.bytes = self.failed = self.failed_bytes = 0
        #: The acknowledged events' ids, once ids are given (audit.sketch).
        self.sketch: EventSketch | None = None
        #: How long after its event time each acknowledged event was acknowledged (audit.latency).
        self.latency = LatencyBuckets()


class AuditCounter:
    """Counts per (server, topic, window); safe to call from the sending thread and the acknowledging one."""

    def __init__(self, *, window_ms: int, datacenter: str, application: str, tier: str = PRODUCER_TIER) -> None:
        if window_ms <= 0:
            raise ValueError(f"the audit window must be positive, got {window_ms} ms")
        self.window_ms = window_ms
        self.datacenter = datacenter
        self.application = application
        self.tier = tier
        self._windows: dict[tuple[str, str, int], _Window] = {}
        self._lock = threading.Lock()

    def window_start(self, event_time_ms: int) -> int:
        return event_time_ms - event_time_ms % self.window_ms

    def sent(self, server: str, topic: str, event_time_ms: int, n: int = 1) -> None:
        """`n` events were handed to the producer: in flight until acknowledged or failed."""
        self.sent_all({(server, topic, event_time_ms): n})

    def sent_all(self, counts: Mapping[tuple[str, str, int], int]) -> None:
        """Events handed to the producer, `counts[(server, topic, event time)]` of each."""
        window_ms = self.window_ms
        with self._lock:
            windows = self._windows
            for (server, topic, event_time_ms), n in counts.items():
                start = event_time_ms - event_time_ms % window_ms
                window = windows.get((server, topic, start))
                if window is None:
                    window = windows[(server, topic, start)] = _Window()
                window.in_flight += n

    def settled(self, outcomes: list[tuple[str, str, int, int]], acknowledged: bool,
                event_ids: Sequence[str | bytes | None] | None = None) -> None:
        """Events (server, topic, event time, encoded bytes) the broker acknowledged, or that failed;
        ``event_ids`` (one per outcome, None where unknown) go into the windows' sketches when acknowledged."""
        window_ms = self.window_ms
        by_window: dict[tuple[str, str, int], list[str | bytes]] = {}
        now_s = time.time()
        with self._lock:
            windows = self._windows
            for n, (server, topic, event_time_ms, size) in enumerate(outcomes):
                key = (server, topic, event_time_ms - event_time_ms % window_ms)
                window = windows[key]
                window.in_flight -= 1
                if acknowledged:
                    window.count += 1
                    window.bytes += size
                    window.latency.add(now_s - event_time_ms / 1000)
                    if event_ids is not None and event_ids[n] is not None:
                        by_window.setdefault(key, []).append(event_ids[n])  # type: ignore[arg-type]
                else:
                    window.failed += 1
                    window.failed_bytes += size
            for key, ids in by_window.items():
                window = windows[key]
                if window.sketch is None:
                    window.sketch = EventSketch()
                window.sketch.add(ids)

    def in_flight(self) -> int:
        with self._lock:
            return sum(w.in_flight for w in self._windows.values())

    def take_counted(self) -> list[dict[str, Any]]:
        """AuditCount records of everything settled so far in every window, open ones too, their counts then
        started again from zero (a window's records add up): for a tier that must publish what it counted
        before it may say so elsewhere (the mirror, before committing source offsets)."""
        taken = []
        with self._lock:
            for key, window in list(self._windows.items()):
                if window.count or window.failed:
                    server, topic, start = key
                    record = self._record(server, topic, start, window)
                    record["properties"].pop("unsettled", None)
                    taken.append(record)
                    fresh = _Window()
                    fresh.in_flight = window.in_flight
                    self._windows[key] = window = fresh
                if not window.in_flight:
                    del self._windows[key]
        taken.sort(key=lambda r: (r["windowStart"], r["host"], r["topic"]))
        return taken

    def close_windows(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """AuditCount records of the windows that ended by `now_ms` with nothing in flight, removed from the
        counter; `now_ms` None closes every window (at shutdown, after the producer settled everything)."""
        closed = []
        with self._lock:
            for key, window in list(self._windows.items()):
                server, topic, start = key
                if now_ms is not None and (start + self.window_ms > now_ms or window.in_flight):
                    continue
                del self._windows[key]
                closed.append(self._record(server, topic, start, window))
        closed.sort(key=lambda r: (r["windowStart"], r["host"], r["topic"]))
        return closed

    def _record(self, server: str, topic: str, start: int, window: _Window) -> dict[str, Any]:
        # recordId tells copies of this record (a retried publish, a mirrored audit topic) from another host's
        # record that happens to say the same.
        properties = {"failed": str(window.failed), "failedBytes": str(window.failed_bytes),
                      "recordId": uuid.uuid4().hex, "latency": window.latency.to_text()}
        if window.in_flight:
            properties["unsettled"] = str(window.in_flight)
        return {"topic": topic, "tier": self.tier, "windowStart": start, "windowEnd": start + self.window_ms,
                "host": server, "datacenter": self.datacenter, "application": self.application,
                "count": window.count, "bytes": window.bytes,
                "sketch": None if window.sketch is None else window.sketch.to_bytes(), "properties": properties}


class AuditPublisher:
    """A thread that publishes AuditCount records to the audit topic, retrying what the broker refused."""

    def __init__(self, config: dict[str, Any], registry: SchemaRegistryClient, topic: str, *,
                 published: Counter, failures: Counter, retry_backoff_s: float = 1.0) -> None:
        self.topic = topic
        self.published_total = published
        self.failures_total = failures
        self.retry_backoff_s = retry_backoff_s
        self.encoder = AvroEncoder(registry, {topic: load_schema(AUDIT_NAME)})
        self.producer = Producer({**config, "producer.type": "sync", "serializer.class": self.encoder})
        self.published = 0
        self._pending: list[dict[str, Any]] = []
        self._queue: queue.Queue[list[dict[str, Any]] | None] = queue.Queue()
        self._give_up = threading.Event()
        self._enqueued = 0
        self._published_changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="audit-publisher", daemon=True)

    def start(self) -> "AuditPublisher":
        self.encoder.writer_for(self.topic)
        self._thread.start()
        return self

    def publish(self, records: list[dict[str, Any]]) -> int:
        """Queue ``records``; the number of records queued so far, for ``wait_published``."""
        with self._published_changed:
            if records:
                self._enqueued += len(records)
                self._queue.put(records)
            return self._enqueued

    def wait_published(self, upto: int, timeout_s: float) -> bool:
        """Wait until the first ``upto`` records queued are published (True), or ``timeout_s`` passes (False)."""
        with self._published_changed:
            return self._published_changed.wait_for(lambda: self.published >= upto, timeout_s)

    def close(self, timeout_s: float) -> int:
        """Publish what is queued, retrying for at most `timeout_s`; the number of records left unpublished."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._give_up.set()
            self._thread.join()
        left = len(self._pending) + sum(len(batch) for batch in self._queue.queue if batch)
        self.producer.close()
        return left

    def _run(self) -> None:
        closing = False
        while not (closing and not self._pending):
            try:
                item = self._queue.get(block=not self._pending and not closing)
                while True:
                    if item is None:
                        closing = True
                    else:
                        self._pending.extend(item)
                    item = self._queue.get_nowait()
            except queue.Empty:
                pass
            if not self._pending:
                continue
            try:
                self.producer.send([ProducerData(self.topic, r["topic"].encode(), [r]) for r in self._pending])
            except (KafkaClientError, KafkaProtocolError) as exc:
                self.failures_total.inc()
                log.warning("could not publish %d audit counts (will retry): %s", len(self._pending), exc)
                if self._give_up.wait(self.retry_backoff_s):
                    return
                continue
            with self._published_changed:
                self.published += len(self._pending)
                self._published_changed.notify_all()
            self.published_total.inc(len(self._pending))
            self._pending = []
