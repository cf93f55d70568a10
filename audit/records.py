"""What one AuditCount record counts, as docs/accounting.md says each tier publishes it: a tier's own count, the
producer tier's failures (``properties.failed``/``failedBytes``/``failedSketch``; a record without ``failed`` but
with ``created``: created - count) and the events it still had in flight (``properties.unsettled``, which its records
of a window add up) and quarantine records (``properties.quarantined``, the
reason, and ``withoutId``).

:func:`read_audit_count` turns a decoded record into the measures it adds (:mod:`audit.measures`), or raises
:class:`UnreadableRecord` with a short, stable reason (a metric label) when it can never be counted.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Mapping

from audit.measures import failed_measure, quarantine_measure, unsettled_measure
from audit.reconcile import PRODUCER, TierCount
from pipeline.auditing.latency import LatencyBuckets
from pipeline.auditing.sketch import EventSketch, SketchError

__all__ = ["AuditCountRecord", "RetriableError", "UnreadableRecord", "read_audit_count"]


class UnreadableRecord(Exception):
    """A record that can never be counted (skipped and counted under ``reason``); ``detail`` says why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class RetriableError(Exception):
    """A record that cannot be counted now (the schema registry is unreachable): read again after a backoff."""


@dataclass
class AuditCountRecord:
    """One AuditCount as the audit counts it: who counted (``tier``), what (``topic``, ``datacenter``, the window)
    and the measures it adds."""

    record_id: str | None
    tier: str
    topic: str
    datacenter: str
    window_start: int
    measures: list[tuple[str, TierCount]]
    latency: LatencyBuckets | None


def _millis(audit: Mapping[str, Any], name: str) -> int:
    """A timestamp-millis field as fastavro gives it (a datetime) or as written (an int)."""
    value = _field(audit, name, object)
    try:
        return round(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)
    except (TypeError, ValueError, OverflowError):
        raise UnreadableRecord("missing field", f"{name} is not a time: {value!r}") from None


def _field(audit: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in audit or audit[name] is None:
        raise UnreadableRecord("missing field", f"no {name}")
    value = audit[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UnreadableRecord("missing field", f"{name} is a {type(value).__name__}")
    return value


def _sketch(data: bytes | None, what: str) -> EventSketch | None:
    if data is None:
        return None
    try:
        return EventSketch.from_bytes(data)
    except SketchError as exc:
        raise UnreadableRecord("invalid sketch", f"{what}: {exc}") from None


def _number(properties: Mapping[str, str], name: str) -> int | None:
    text = properties.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise UnreadableRecord("invalid property", f"{name}={text!r} is not a number") from None


def read_audit_count(audit: Mapping[str, Any], window_ms: int) -> AuditCountRecord:
    """The measures of ``audit`` (a decoded AuditCount) in windows of ``window_ms``; UnreadableRecord if not."""
    topic, tier = _field(audit, "topic", str), _field(audit, "tier", str)
    datacenter = _field(audit, "datacenter", str)
    start, end = _millis(audit, "windowStart"), _millis(audit, "windowEnd")
    if start % window_ms or end - start != window_ms:
        raise UnreadableRecord("another window size", f"window [{start}, {end}) is not one of {window_ms} ms")
    count, size = _field(audit, "count", int), _field(audit, "bytes", int)
    properties: Mapping[str, str] = audit.get("properties") or {}
    sketch = _sketch(audit.get("sketch"), "sketch")
    latency = None
    if properties.get("latency"):
        try:
            latency = LatencyBuckets.from_text(properties["latency"])
        except ValueError:
            raise UnreadableRecord("invalid property", f"latency={properties['latency']!r}") from None
    measures: list[tuple[str, TierCount]] = []
    reason = properties.get("quarantined")
    if reason is not None:
        measures.append((quarantine_measure(tier, reason), TierCount(count, size, sketch)))
        without_id = _number(properties, "withoutId")
        if without_id:
            measures.append((quarantine_measure(tier, reason, with_id=False), TierCount(without_id)))
    else:
        measures.append((tier, TierCount(count, size, sketch)))
    if tier == PRODUCER and reason is None:
        created, failed = _number(properties, "created"), _number(properties, "failed")
        unsent = failed if failed is not None else (created - count if created is not None else 0)
        unsettled = _number(properties, "unsettled")
        if unsettled:
            measures.append((unsettled_measure(tier), TierCount(unsettled)))
        failed_sketch = None
        if properties.get("failedSketch"):
            try:
                failed_sketch = _sketch(base64.b64decode(properties["failedSketch"], validate=True), "failedSketch")
            except binascii.Error:
                raise UnreadableRecord("invalid sketch", "failedSketch is not base64") from None
        if unsent or failed_sketch is not None:
            measures.append((failed_measure(tier), TierCount(unsent, _number(properties, "failedBytes") or 0,
                                                             failed_sketch)))
    return AuditCountRecord(properties.get("recordId"), tier, topic, datacenter, start, measures, latency)
