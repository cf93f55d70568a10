"""The audit service's Prometheus metrics: completeness per topic and tier, incomplete windows, the events named
lost or duplicated, and each tier's latency from event time."""

from __future__ import annotations

import threading
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily

from audit.latency import BUCKETS, LatencyBuckets
from audit.reconcile import WindowKey, WindowResult

__all__ = ["AuditMetrics"]


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
                                  "Completeness of the newest reconciled window (count at the tier / at the producer "
                                  "tier, all datacenters)", ["topic", "tier"], registry=r)
        self.incomplete = Gauge("audit_incomplete_windows",
                                "Reconciled windows (past their grace, still retained) below the completeness "
                                "threshold or with named losses or duplicates", ["topic", "tier"], registry=r)
        self.threshold = Gauge("audit_completeness_threshold", "The completeness threshold setting", registry=r)
        self.lost = Counter("audit_events_lost", "Events named missing at a tier (their earlier tier had them)",
                            ["topic", "tier"], registry=r)
        self.duplicated = Counter("audit_events_duplicated", "Extra copies of events named at a tier",
                                  ["topic", "tier"], registry=r)
        self.windows = Counter("audit_windows_reconciled", "Window reconciliations (a window reopened by late data "
                               "counts again)", registry=r)
        self.group_lag = Gauge("kafka_consumergroup_lag",
                               "Records a consumer group has yet to commit past, per cluster and partition (from the "
                               "offsets it keeps in the cluster's ZooKeeper)",
                               ["cluster", "group", "topic", "partition"], registry=r)
        self._latency: dict[tuple[str, str], LatencyBuckets] = {}
        self._threshold = 1.0
        #: Incomplete windows per (topic, tier), and per topic the newest window's start and results (datacenters).
        self._incomplete: dict[tuple[str, str], int] = {}
        self._newest: dict[str, tuple[int, dict[WindowKey, WindowResult]]] = {}
        self._latency_lock = threading.Lock()
        r.register(_LatencyCollector(self))

    def observe_latency(self, topic: str, tier: str, seconds: float) -> None:
        """One event seen at a cluster tier ``seconds`` after its event time."""
        with self._latency_lock:
            self._buckets(topic, tier).add(seconds)

    def add_latency(self, topic: str, tier: str, latency: LatencyBuckets) -> None:
        """A tier's own latency counts (from its AuditCount) added in."""
        with self._latency_lock:
            self._buckets(topic, tier).merge(latency)

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
        before = {(d.later, "missing"): d.missing for d in (previous.discrepancies if previous else [])}
        before.update({(d.later, "duplicated"): d.duplicated for d in (previous.discrepancies if previous else [])})
        topic = result.key.topic
        for d in result.discrepancies:
            for kind, named, counter in (("missing", d.missing, self.lost), ("duplicated", d.duplicated,
                                                                             self.duplicated)):
                old = before.get((d.later, kind), {})
                new = sum(max(0, copies - old.get(event, 0)) for event, copies in named.items())
                if new:
                    counter.labels(topic, d.later).inc(new)

    def set_windows(self, results: list[WindowResult], threshold: float) -> None:
        """Gauges from every retained result (at start)."""
        self.threshold.set(threshold)
        self._threshold = threshold
        self._incomplete = {}
        self._newest = {}
        for result in results:
            self.window_changed(None, result)

    def window_changed(self, previous: WindowResult | None, result: WindowResult | None) -> None:
        """Gauges updated for one window's new ``result`` (None: dropped at retention) replacing ``previous``
        (None: its first), at a cost independent of the windows retained."""
        changed = previous or result
        if changed is None:
            return
        topic, start = changed.key.topic, changed.key.window_start
        for old, sign in ((previous, -1), (result, 1)):
            if old is None:
                continue
            named = {d.later for d in old.discrepancies if d.missing or d.duplicated or not d.decoded}
            for tier in old.counts:
                ratio = old.completeness.get(tier)
                bad = tier in named or (ratio is not None and ratio < self._threshold)
                value = self._incomplete[(topic, tier)] = self._incomplete.get((topic, tier), 0) + sign * bad
                self.incomplete.labels(topic, tier).set(value)
        newest = self._newest.get(topic)
        if result is not None and (newest is None or newest[0] < start):
            newest = self._newest[topic] = (start, {})
        if newest is None or newest[0] != start:
            return
        if result is None:
            newest[1].pop(changed.key, None)
            return
        newest[1][result.key] = result
        totals: dict[str, list[int]] = {}
        for window in newest[1].values():
            produced = window.counts.get("producer", 0)
            for tier, count in window.counts.items():
                pair = totals.setdefault(tier, [0, 0])
                pair[0] += count
                pair[1] += produced
        for tier, (count, produced) in totals.items():
            if produced:
                self.completeness.labels(topic, tier).set(count / produced)
