"""The emulators' Prometheus metrics, in a registry of their own (served at /metrics when a port is set)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["EmulatorMetrics", "total"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class EmulatorMetrics:
    """Counters of events sent, acknowledged and failed per topic, bytes, send latency and the rate held."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sent = Counter("emulator_events_sent_total", "Events handed to the producer", ["topic"], registry=r)
        self.acknowledged = Counter("emulator_events_acknowledged_total", "Events the broker acknowledged",
                                    ["topic"], registry=r)
        self.failed = Counter("emulator_events_failed_total", "Events the producer could not store", ["topic"],
                              registry=r)
        self.bytes = Counter("emulator_event_bytes_total", "Encoded bytes of the acknowledged events", ["topic"],
                             registry=r)
        self.latency = Histogram("emulator_send_latency_seconds",
                                 "Per acknowledged batch, from handing its oldest event to the producer to the "
                                 "acknowledgement",
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.target_rate = Gauge("emulator_target_rate_events_per_second", "The rate asked for", registry=r)
        self.skipped = Counter("emulator_events_skipped_total",
                               "Events the emulator fell behind by and dropped from its schedule", registry=r)
        self.audit_published = Counter("emulator_audit_counts_published_total",
                                       "AuditCount records published to the audit topic", registry=r)
        self.audit_failures = Counter("emulator_audit_publish_failures_total",
                                      "Attempts to publish AuditCount records that failed (retried)", registry=r)


def total(counter: Counter) -> int:
    """The sum of a counter over all its labels."""
    return int(sum(sample.value for metric in counter.collect() for sample in metric.samples
                   if sample.name.endswith("_total")))
