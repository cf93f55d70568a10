"""The mirror's Prometheus metrics, in a registry of their own (served at /metrics when metrics.port is set)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["MirrorMetrics"]

_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0, 3600.0)


class MirrorMetrics:
    """Records and bytes mirrored, lag, record age, latency, errors, commits, transactions, lost offsets, quarantined
    records, audit publishing."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records = Counter("mirror_records_total", "Records the target acknowledged", ["source", "topic"],
                               registry=r)
        self.bytes = Counter("mirror_bytes_total", "Key and value bytes of the records the target acknowledged",
                             ["source", "topic"], registry=r)
        self.lag = Gauge("mirror_lag_records",
                         "Per owned source partition: its latest offset minus the offset the mirror commits",
                         ["source", "topic", "partition"], registry=r)
        self.age = Histogram("mirror_record_age_seconds",
                             "Per acknowledged batch, how old its oldest record was (its timestamp) at the "
                             "target's acknowledgement",
                             buckets=_SECONDS_BUCKETS, registry=r)
        self.latency = Histogram("mirror_replication_latency_seconds",
                                 "Per acknowledged batch, from its first record being handed to the mirror to the "
                                 "target's acknowledgement",
                                 buckets=_SECONDS_BUCKETS, registry=r)
        self.in_flight = Gauge("mirror_records_in_flight", "Records sent and not yet acknowledged", registry=r)
        self.errors = Counter("mirror_errors_total", "Errors, by kind", ["kind"], registry=r)
        self.commits = Counter("mirror_offset_commits_total",
                               "Source offsets written: to ZooKeeper, or (exactly.once) in the target with a "
                               "transaction", ["source"], registry=r)
        self.transactions = Counter("mirror_transactions_total",
                                    "exactly.once: transactions ended, by outcome (committed, aborted)",
                                    ["source", "outcome"], registry=r)
        self.lost = Counter("mirror_lost_offsets_total",
                            "Source offsets deleted by retention before they were mirrored, skipped "
                            "(skip.lost.offsets=true)", ["source", "topic", "partition"], registry=r)
        self.quarantined = Counter("mirror_records_quarantined_total",
                                   "Records the target refused for good, set aside in the quarantine under state.dir",
                                   ["source", "topic", "reason"], registry=r)
        self.topics_created = Counter("mirror_target_topics_created_total", "Target topics created", registry=r)
        self.audit_published = Counter("mirror_audit_counts_published_total",
                                       "AuditCount records published to the audit topic", registry=r)
        self.audit_failures = Counter("mirror_audit_publish_failures_total",
                                      "Attempts to publish AuditCount records that failed (retried)", registry=r)
