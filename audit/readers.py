"""The audit service's readers: what a cluster holds (tier ``datacenter`` or ``offline``) and the AuditCount
records the other tiers publish, each counted into its own checkpoint (:mod:`audit.state`).

A reader is a :class:`~pipeline.client.static_connector.StaticConsumerConnector` over a cluster (every
partition of the topics it follows, new ones included), one thread counting what it hands out and committing
every ``checkpoint_s`` -- the commit writes the offsets and the counts in one record, so a restart counts every
record exactly once.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any, Callable

from audit.latency import LatencyBuckets
from audit.reconcile import TierCount
from audit.sketch import EventSketch
from audit.state import CheckpointedCounts
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.consumer_stream import ConsumerTimeout
from pipeline.client.errors import KafkaClientError
from pipeline.client.static_connector import StaticConsumerConnector
from pipeline.client.topic_filter import TopicFilter
from pipeline.protocol.errors import KafkaProtocolError
from schemas.serde import AvroDecoder, event_key

__all__ = ["AuditCountReader", "ClusterReader", "EventCounter"]

log = logging.getLogger(__name__)


class ClusterReader:
    """Counts each record ``handle`` is given, committing offsets with the counts every ``checkpoint_s``."""

    def __init__(self, name: str, connector: StaticConsumerConnector, topics: TopicFilter, counts: CheckpointedCounts,
                 handle: Callable[[ConsumerRecord], None], checkpoint_s: float = 5.0) -> None:
        self.name = name
        self.connector = connector
        self.counts = counts
        self._topics = topics
        self._handle = handle
        self._checkpoint_s = checkpoint_s
        self._positions: dict[tuple[str, int], int] = {}
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.records = 0

    def start(self, stop: threading.Event) -> "ClusterReader":
        self._thread = threading.Thread(target=self._run, args=(stop,), name=f"audit-{self.name}", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        (stream,) = self.connector.create_message_streams_by_filter(self._topics, 1)
        next_checkpoint = time.monotonic() + self._checkpoint_s
        try:
            while not stop.is_set():
                try:
                    record = next(stream)
                except ConsumerTimeout:
                    record = None
                except StopIteration:
                    break
                if record is not None:
                    self._handle(record)
                    self._positions[(record.topic, record.partition)] = record.offset + 1
                    self.records += 1
                if time.monotonic() >= next_checkpoint:
                    self.checkpoint()
                    next_checkpoint = time.monotonic() + self._checkpoint_s
            self.checkpoint()
        except (KafkaClientError, KafkaProtocolError, OSError) as exc:
            self.failure = exc
            log.error("audit reader %s stopped: %s", self.name, exc)
            stop.set()
        finally:
            self.connector.shutdown()
            self.counts.close()

    def checkpoint(self) -> None:
        """Write the counts and the offsets they include (a commit of what was handed out so far)."""
        if self._positions:
            self.connector.commit_offsets(dict(self._positions))


class EventCounter:
    """Counts the events a cluster holds under (tier, topic, datacenter, window), ids into the sketch, and
    observes each event's age as the audit sees it."""

    def __init__(self, tier: str, counts: CheckpointedCounts, window_ms: int,
                 observe_latency: Callable[[str, str, float], None] | None = None) -> None:
        self.tier = tier
        self.counts = counts
        self.window_ms = window_ms
        self._observe = observe_latency
        self.unreadable = 0

    def __call__(self, record: ConsumerRecord) -> None:
        value = record.value
        found = event_key(value) if value else None
        if found is None:
            self.unreadable += 1
            return
        start = found.event_time - found.event_time % self.window_ms
        size = len(value) + (0 if record.key is None else len(record.key))
        self.counts.count((self.tier, record.topic, found.datacenter, start), size,
                          bytes.fromhex(found.event_id.replace("-", "")))
        if self._observe is not None:
            self._observe(record.topic, self.tier, time.time() - found.event_time / 1000)


class AuditCountReader:
    """Adds each AuditCount record of the other tiers to the counts; a copy of a record already counted
    (re-published after a retry, or mirrored into another cluster's audit topic: the same recordId) is counted
    once."""

    def __init__(self, counts: CheckpointedCounts, decoder: AvroDecoder, audit_topic: str,
                 own_tiers: frozenset[str],
                 observe_latency: Callable[[str, str, LatencyBuckets], None] | None = None) -> None:
        self.counts = counts
        self._observe_latency = observe_latency
        self._decoder = decoder
        self._topic = audit_topic
        self._own_tiers = own_tiers

    def __call__(self, record: ConsumerRecord) -> None:
        value = record.value
        if not value:
            return
        try:
            audit: dict[str, Any] = self._decoder.decode(value, self._topic)
        except (ValueError, KeyError, EOFError) as exc:
            log.warning("unreadable AuditCount at %s-%d@%d: %s", record.topic, record.partition, record.offset, exc)
            return
        if audit["tier"] in self._own_tiers:
            return
        # A record's copies share its recordId; one without (written by another tool) is known by its bytes.
        digest = (audit.get("properties") or {}).get("recordId") or hashlib.blake2b(value, digest_size=16).hexdigest()
        start = _millis(audit["windowStart"])
        if not self.counts.first_seen(digest, start):
            return
        sketch = EventSketch.from_bytes(audit["sketch"]) if audit.get("sketch") else None
        latency = (audit.get("properties") or {}).get("latency")
        if latency and self._observe_latency is not None:
            try:
                self._observe_latency(audit["topic"], audit["tier"], LatencyBuckets.from_text(latency))
            except ValueError:
                log.warning("AuditCount at %s-%d@%d: unreadable latency %r", record.topic, record.partition,
                            record.offset, latency)
        self.counts.add((audit["tier"], audit["topic"], audit["datacenter"], start),
                        TierCount(audit["count"], audit["bytes"], sketch))


def _millis(value: Any) -> int:
    """A timestamp-millis field as fastavro gives it (a datetime) or as written (an int)."""
    return round(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)
