"""The warehouse tier's AuditCount records (docs/accounting.md): rows loaded per topic, datacenter and window of
event time, and quarantine records for what a run set aside, as a manifest keeps them and as they are published.

A run's tasks report their counts through Spark's accumulator (etl.task); :class:`AuditCounts` adds them up per
topic and window and :meth:`AuditCounts.records` makes the records, each with a ``recordId`` of its own, kept in
the manifest so that a publish redone after a crash sends the same records (the audit counts copies once):

    rows        count/bytes/sketch: the rows loaded; properties: run, latency, recordId
    quarantine  count/bytes/sketch: the quarantined records with an event id; properties: run, recordId, latency,
                quarantined (the reason), withoutId (those without an id)

In the manifest a sketch is base64 text; :func:`publish_audit` sends them to the offline cluster's audit topic.
"""

from __future__ import annotations

import base64
import socket
import uuid
from typing import Any, Iterable

from prometheus_client import CollectorRegistry, Counter

from etl.config import EtlConfig
from etl.plan import EtlError
from pipeline.auditing.latency import LatencyBuckets
from pipeline.auditing.publisher import AuditPublisher
from pipeline.security.client_settings import security_settings
from pipeline.auditing.sketch import EventSketch
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import audit_count_encoder

__all__ = ["AuditCounts", "WAREHOUSE_TIER", "publish_audit"]

WAREHOUSE_TIER = "warehouse"
_AUDIT_TIMEOUT_S = 30.0


class AuditCounts:
    """Counts of one commit per (topic, datacenter, window start), rows and quarantined records apart."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        #: (topic, datacenter, start) -> [rows, bytes, sketch or None, latency]
        self.rows: dict[tuple[str, str, int], list[Any]] = {}
        #: (topic, reason, datacenter, start) -> [with an id, their bytes, sketch or None, without an id, latency]
        self.quarantined: dict[tuple[str, str, str, int], list[Any]] = {}

    def add_task_stats(self, topic: str, stats: dict[str, Any]) -> None:
        """Add what one range's task reported (etl.task's stats: ``windows`` and ``quarantined``)."""
        for datacenter, start, count, size, sketch, latency in stats["windows"]:
            counts = self.rows.setdefault((topic, datacenter, start), [0, 0, None, LatencyBuckets()])
            counts[0] += count
            counts[1] += size
            counts[2] = _merge(counts[2], sketch)
            counts[3].merge(LatencyBuckets.from_text(latency))
        for reason, datacenter, start, count, size, sketch, without in stats.get("quarantined", ()):
            counts = self.quarantined.setdefault((topic, reason, datacenter, start),
                                                 [0, 0, None, 0, LatencyBuckets()])
            counts[0] += count
            counts[1] += size
            counts[2] = _merge(counts[2], sketch)
            counts[3] += without

    def add_rows(self, topic: str, datacenter: str, start: int, event_ids: Iterable[str], sizes: int,
                 ages_s: Iterable[float]) -> None:
        """Add rows counted outside Spark (the quarantine's replay)."""
        ids = list(event_ids)
        counts = self.rows.setdefault((topic, datacenter, start), [0, 0, None, LatencyBuckets()])
        ages = list(ages_s)
        counts[0] += len(ages)
        counts[1] += sizes
        if ids:
            sketch = EventSketch()
            sketch.add(ids)
            counts[2] = sketch if counts[2] is None else counts[2] + sketch
        for age in ages:
            counts[3].add(age)

    def unquarantine(self, topic: str, reason: str, datacenter: str, time_ms: int, event_id: str | None,
                     size: int) -> None:
        """Take one record out of the quarantine counts of (topic, reason, datacenter, window of ``time_ms``): a
        replay loaded it, so its quarantine record is netted out by a negative one (docs/accounting.md)."""
        start = time_ms - time_ms % self.window_ms
        counts = self.quarantined.setdefault((topic, reason, datacenter, start), [0, 0, None, 0, LatencyBuckets()])
        if event_id:
            counts[0] -= 1
            counts[1] -= size
            sketch = EventSketch()
            sketch.add([event_id], copies=-1)
            counts[2] = sketch if counts[2] is None else counts[2] + sketch
        else:
            counts[3] -= 1

    def records(self, run_id: str, properties: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The AuditCount records (JSON form, the sketch in base64), rows first."""
        host = f"etl-{socket.gethostname()}"
        extra = dict(properties or {})

        def record(topic: str, datacenter: str, start: int, count: int, size: int, sketch: EventSketch | None,
                   more: dict[str, str]) -> dict[str, Any]:
            return {"topic": topic, "tier": WAREHOUSE_TIER, "windowStart": start, "windowEnd": start + self.window_ms,
                    "host": host, "datacenter": datacenter, "application": "etl", "count": count, "bytes": size,
                    "sketch": None if sketch is None else base64.b64encode(sketch.to_bytes()).decode(),
                    "properties": {"run": run_id, "recordId": uuid.uuid4().hex, **extra, **more}}

        found = [record(topic, datacenter, start, count, size, sketch, {"latency": latency.to_text()})
                 for (topic, datacenter, start), (count, size, sketch, latency) in sorted(self.rows.items())]
        found += [record(topic, datacenter, start, count, size, sketch,
                         {"quarantined": reason, "withoutId": str(without), "latency": latency.to_text()})
                  for (topic, reason, datacenter, start), (count, size, sketch, without, latency)
                  in sorted(self.quarantined.items())]
        return found

    def quarantined_by_topic(self) -> dict[str, dict[str, int]]:
        """Quarantined records per topic and reason (with an id or not)."""
        found: dict[str, dict[str, int]] = {}
        for (topic, reason, _, _), counts in self.quarantined.items():
            by_reason = found.setdefault(topic, {})
            by_reason[reason] = by_reason.get(reason, 0) + counts[0] + counts[3]
        return found


def _merge(sketch: EventSketch | None, text: str | None) -> EventSketch | None:
    if text is None:
        return sketch
    found = EventSketch.from_bytes(base64.b64decode(text))
    return found if sketch is None else sketch + found


def publish_audit(config: EtlConfig, records: list[dict[str, Any]]) -> None:
    """Send ``records`` (a manifest's) to the offline cluster's audit topic, acks=all; EtlError when some could
    not be published in time (the commit's journal keeps the step to do again)."""
    if not records:
        return
    metrics = CollectorRegistry()
    registry = SchemaRegistryClient.from_config(config)
    publisher = AuditPublisher({"zookeeper.connect": config["zookeeper.connect"], "request.required.acks": -1,
                                **security_settings(config)},
                               audit_count_encoder(registry, config["audit.topic"]), config["audit.topic"],
                               published=Counter("etl_audit_published", "", registry=metrics),
                               failures=Counter("etl_audit_failures", "", registry=metrics))
    try:
        try:
            publisher.start()
        except BaseException:
            publisher.producer.close()
            raise
        publisher.publish([{**r, "sketch": None if r.get("sketch") is None else base64.b64decode(r["sketch"])}
                           for r in records])
        left = publisher.close(_AUDIT_TIMEOUT_S)
    finally:
        registry.close()
    if left:
        raise EtlError(f"{left} of {len(records)} audit counts could not be published to {config['audit.topic']} "
                       f"(the data is committed; the next run publishes them)")
