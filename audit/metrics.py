"""The audit service's Prometheus metrics: completeness per topic and tier, incomplete, pending and unaccounted
windows, the events named lost, duplicated, unexpected or quarantined, the records its readers skipped, their lag,
and each tier's latency from event time."""

from __future__ import annotations

import threading
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily

from audit.reconcile import TIERS, WindowKey, WindowResult
from pipeline.auditing.latency import BUCKETS, LatencyBuckets

__all__ = ["AuditMetrics"]

#: Tier states (WindowResult.tier_states) that make a window incomplete at the tier (an event no producer created,
#: ``unexpected``, takes nothing from the events created: audit_events_unexpected_total says it, not this).
_BAD_STATES = frozenset({"lost", "quarantined", "duplicated", "short"})


class _LatencyCollector:
    """``audit_tier_latency_seconds{topic,tier}``: a histogram made of the bucket counts every tier sends."""

    def __init__(self, metrics: "AuditMetrics") -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily("audit_tier_latency_seconds",
                                       "Time from an event's event time to its arrival at a tier (acknowledged by the "
                                       "cluster, the target, loaded by the ETL, or read by the audit's consumers)",
                                       labels=["topic", "tier"])
        for (topic, tier), latency in sorted(self._metrics.latency_snapshot().items()):
            cumulative, buckets = 0, []
            for bound, count in zip([*BUCKETS, float("inf")], latency.counts):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            family.add_metric([topic, tier], buckets, latency.total)
        yield family


class AuditMetrics:
    """One registry per service (served at /metrics)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.completeness = Gauge("audit_window_completeness_ratio",
                                  "Completeness of the newest window ready at the tier (count at the tier / events "
                                  "created, all datacenters)", ["topic", "tier"], registry=r)
        self.incomplete = Gauge("audit_incomplete_windows",
                                "Retained windows ready at the tier and below the completeness threshold there, or "
                                "with events named lost, duplicated or quarantined there", ["topic", "tier"],
                                registry=r)
        self.threshold = Gauge("audit_completeness_threshold", "The completeness threshold setting", registry=r)
        self.failed_logins = Counter("audit_http_failed_logins", "Logins to the dashboard and API refused, by reason "
                                     "(bad_credentials, malformed)", ["reason"], registry=r)
        self.lost = Counter("audit_events_lost", "Events named lost at a tier (the first tier without them; only "
                            "tiers ready for the window name events)", ["topic", "tier"], registry=r)
        self.duplicated = Counter("audit_events_duplicated", "Extra copies of events named at a tier",
                                  ["topic", "tier"], registry=r)
        self.unexpected = Counter("audit_events_unexpected", "Events held at a tier that no producer tier counted "
                                  "(created by a producer the audit does not hear from), with their copies",
                                  ["topic", "tier"], registry=r)
        self.quarantined = Counter("audit_events_quarantined", "Records a tier set aside (quarantined), per reason",
                                   ["topic", "tier", "reason"], registry=r)
        self.unaccounted = Gauge("audit_unaccounted_windows",
                                 "Retained windows where events created != distinct events held + lost + quarantined",
                                 ["topic"], registry=r)
        self.pending_windows = Gauge("audit_pending_windows",
                                     "Windows past their grace that a tier has not provably counted everything of yet "
                                     "(compared once it has)", ["tier"], registry=r)
        self.pending_age = Gauge("audit_oldest_pending_window_age_seconds",
                                 "Time since the end of the oldest window pending at the tier (0: none pending)",
                                 ["tier"], registry=r)
        self.skipped = Counter("audit_records_skipped", "Records a reader of the audit skipped because they can never "
                               "be counted (logged with their partition and offset)", ["reader", "reason"],
                               registry=r)
        self.reader_lag = Gauge("audit_reader_lag_records",
                                "Records a reader of the audit has yet to read (to the newest end offsets sampled)",
                                ["reader"], registry=r)
        self.windows = Counter("audit_windows_reconciled", "Window reconciliations (a window reopened by late data "
                               "counts again)", registry=r)
        self.group_lag = Gauge("kafka_consumergroup_lag",
                               "Records a consumer group has yet to commit past, per cluster and partition (from the "
                               "offsets it keeps in the cluster's ZooKeeper)",
                               ["cluster", "group", "topic", "partition"], registry=r)
        self._latency: dict[tuple[str, str], LatencyBuckets] = {}
        self._threshold = 1.0
        #: Incomplete windows per (topic, tier), unaccounted per topic, and per (topic, tier) the newest window
        #: start ready there with its results (datacenters).
        self._incomplete: dict[tuple[str, str], int] = {}
        self._unaccounted: dict[str, int] = {}
        self._newest: dict[tuple[str, str], tuple[int, dict[WindowKey, tuple[int, int]]]] = {}
        self._latency_lock = threading.Lock()
        r.register(_LatencyCollector(self))

    def observe_latencies(self, topic: str, tier: str, seconds: list[float]) -> None:
        """Events seen at a cluster tier, each ``seconds`` after its event time."""
        with self._latency_lock:
            self._buckets(topic, tier).add_all(seconds)

    def add_latency(self, topic: str, tier: str, latency: LatencyBuckets) -> None:
        """A tier's own latency counts (from its AuditCount) added in."""
        with self._latency_lock:
            self._buckets(topic, tier).merge(latency)

    def count_skipped(self, reader: str, reason: str) -> None:
        """A record ``reader`` skipped (it can never be counted) for ``reason``."""
        self.skipped.labels(reader, reason).inc()

    def _buckets(self, topic: str, tier: str) -> LatencyBuckets:
        found = self._latency.get((topic, tier))
        if found is None:
            found = self._latency[(topic, tier)] = LatencyBuckets()
        return found

    def latency_snapshot(self) -> dict[tuple[str, str], LatencyBuckets]:
        with self._latency_lock:
            return {k: LatencyBuckets(v.counts, v.total) for k, v in self._latency.items()}

    def count_named(self, result: WindowResult, previous: WindowResult | None) -> None:
        """Count the events ``result`` names that ``previous`` (the window's last result) did not."""
        self.windows.inc()
        topic = result.key.topic
        for tier in TIERS:
            lost = _more(result.lost.get(tier, {}), previous.lost.get(tier, {}) if previous else {})
            lost += max(0, result.lost_by_count.get(tier, 0) - (previous.lost_by_count.get(tier, 0) if previous
                                                                else 0))
            if lost:
                self.lost.labels(topic, tier).inc(lost)
            duplicated = _more(result.duplicated.get(tier, {}), previous.duplicated.get(tier, {}) if previous else {})
            if duplicated:
                self.duplicated.labels(topic, tier).inc(duplicated)
            unexpected = _more(result.unexpected.get(tier, {}), previous.unexpected.get(tier, {}) if previous else {})
            if unexpected:
                self.unexpected.labels(topic, tier).inc(unexpected)
        before = {(q.tier, q.reason): q.count + q.without_id for q in (previous.quarantined if previous else [])}
        for q in result.quarantined:
            more = q.count + q.without_id - before.get((q.tier, q.reason), 0)
            if more > 0:
                self.quarantined.labels(topic, q.tier, q.reason).inc(more)

    def set_windows(self, results: list[WindowResult], threshold: float) -> None:
        """Gauges from every retained result (at start)."""
        self.threshold.set(threshold)
        self._threshold = threshold
        self._incomplete = {}
        self._unaccounted = {}
        self._newest = {}
        for result in results:
            self.window_changed(None, result)

    def window_changed(self, previous: WindowResult | None, result: WindowResult | None) -> None:
        """Gauges updated for one window's new ``result`` (None: dropped at retention) replacing ``previous``
        (None: its first), at a cost independent of the windows retained."""
        changed = previous or result
        if changed is None:
            return
        topic = changed.key.topic
        for old, sign in ((previous, -1), (result, 1)):
            if old is None:
                continue
            for tier, state in old.tier_states(self._threshold).items():
                bad = state in _BAD_STATES
                value = self._incomplete[(topic, tier)] = self._incomplete.get((topic, tier), 0) + sign * bad
                self.incomplete.labels(topic, tier).set(value)
            if old.unaccounted:
                value = self._unaccounted[topic] = self._unaccounted.get(topic, 0) + sign
                self.unaccounted.labels(topic).set(value)
        if previous is not None:
            for tier in previous.counts:
                newest = self._newest.get((topic, tier))
                if newest is not None and newest[0] == previous.key.window_start:
                    newest[1].pop(previous.key, None)
        if result is None:
            return
        start = result.key.window_start
        created = result.counts.get("producer", 0)
        for tier, count in result.counts.items():
            if tier in result.pending:
                continue
            newest = self._newest.get((topic, tier))
            if newest is None or newest[0] < start:
                newest = self._newest[(topic, tier)] = (start, {})
            elif newest[0] > start:
                continue
            newest[1][result.key] = (count, created)
            counted = sum(c for c, _ in newest[1].values())
            produced = sum(p for _, p in newest[1].values())
            if produced:
                self.completeness.labels(topic, tier).set(counted / produced)


def _more(named: dict[str, int], before: dict[str, int]) -> int:
    """Copies ``named`` names beyond those ``before`` did."""
    return sum(max(0, copies - before.get(event, 0)) for event, copies in named.items())
