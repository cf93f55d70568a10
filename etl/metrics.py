"""The ETL scheduler's Prometheus metrics, in a registry of their own, labelled by group.

The gauges about the last runs start from the run history, so a restarted scheduler exports the time of the
last success (what alerting watches) before its first run; the counters count from the process start, as
Prometheus expects of counters.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pipeline.etl_runs import FAILED, OUTCOMES, PARTIAL, SUCCEEDED, RunHistory, RunReport
from pipeline.service.metrics_server import serve_metrics

__all__ = ["EtlMetrics"]

_DURATION_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)


class EtlMetrics:
    """Runs by outcome, the last run's rows, bytes and duration, totals, failures in a row, skipped offsets,
    quarantined records, topics not loaded, and the warehouse's upkeep."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.registry = CollectorRegistry()
        r, g = self.registry, ["group"]
        self._last_success = Gauge("etl_last_success_timestamp_seconds",
                                   "When the newest run that loaded new offsets (outcome succeeded) finished",
                                   g, registry=r)
        self._last_run = Gauge("etl_last_run_timestamp_seconds", "When the newest run finished, whatever its outcome",
                               g, registry=r)
        self._last_rows = Gauge("etl_last_run_rows", "Rows the newest run wrote", g, registry=r)
        self._last_bytes = Gauge("etl_last_run_bytes", "Bytes of Kafka messages the newest run loaded", g, registry=r)
        self._last_duration = Gauge("etl_last_run_duration_seconds", "How long the newest run took", g, registry=r)
        self._last_first_task = Gauge("etl_last_run_first_task_seconds",
                                      "From the newest run's start to its first Spark task", g, registry=r)
        self._consecutive_failures = Gauge("etl_consecutive_failures",
                                           "Runs failed, or partial (a topic not loaded), since the last run that "
                                           "loaded everything", g, registry=r)
        self._in_progress = Gauge("etl_run_in_progress", "1 while a run of this scheduler loads", g, registry=r)
        self._rows = Counter("etl_rows", "Rows written by this scheduler's runs", g, registry=r)
        self._bytes = Counter("etl_bytes", "Bytes of Kafka messages loaded by this scheduler's runs", g, registry=r)
        self._runs = Counter("etl_runs", "Runs of this scheduler, by outcome", ["group", "outcome"], registry=r)
        self._skipped = Counter("etl_skipped_offsets",
                                "Offsets retention deleted before they were loaded, skipped (out.of.range=earliest)",
                                ["group", "topic", "partition"], registry=r)
        self._quarantined = Counter("etl_records_quarantined",
                                    "Records set aside in the warehouse's quarantine (python -m etl quarantine list)",
                                    ["group", "topic", "reason"], registry=r)
        self._topic_failures = Counter("etl_topic_failures", "Runs that could not load a topic (it waits for the "
                                                             "next run)", ["group", "topic"], registry=r)
        self._expired = Counter("etl_partitions_expired", "Hour partitions deleted by warehouse.retention", g,
                                registry=r)
        self._compacted = Counter("etl_files_compacted", "Small files rewritten by compaction", g, registry=r)
        self._maintenance_failures = Counter("etl_maintenance_failures",
                                             "Runs whose upkeep of the warehouse (retention, compaction) failed", g,
                                             registry=r)
        self._duration = Histogram("etl_run_duration_seconds", "How long this scheduler's runs took", g,
                                   buckets=_DURATION_BUCKETS, registry=r)
        for outcome in OUTCOMES:
            self._runs.labels(group, outcome)
        for unlabelled in (self._expired, self._compacted, self._maintenance_failures):
            unlabelled.labels(group)
        self._server: Any = None
        self._lock = threading.Lock()

    def restore(self, history: RunHistory) -> None:
        """Set the gauges about the last runs from the recorded history."""
        runs = history.runs()
        if not runs:
            return
        self._set_last(runs[0])
        success = next((run for run in runs if run.outcome == SUCCEEDED), None)
        if success is not None and success.finished_at is not None:
            self._last_success.labels(self.group).set(success.finished_at)
        failures = 0
        for run in runs:
            if run.outcome not in (FAILED, PARTIAL):
                break
            failures += 1
        self._consecutive_failures.labels(self.group).set(failures)

    def run_started(self) -> None:
        self._in_progress.labels(self.group).set(1)

    def run_finished(self, report: RunReport | None) -> None:
        """Count a finished run; None for one that failed before it had a report."""
        with self._lock:
            self._in_progress.labels(self.group).set(0)
            outcome = FAILED if report is None else report.outcome or FAILED
            self._runs.labels(self.group, outcome).inc()
            failures = self._consecutive_failures.labels(self.group)
            if outcome in (FAILED, PARTIAL):
                failures.inc()
            else:
                failures.set(0)
            if report is None:
                return
            self._set_last(report)
            self._rows.labels(self.group).inc(report.rows)
            self._bytes.labels(self.group).inc(report.bytes)
            if report.duration_s is not None:
                self._duration.labels(self.group).observe(report.duration_s)
            if outcome == SUCCEEDED and report.finished_at is not None:
                self._last_success.labels(self.group).set(report.finished_at)
            for skipped in report.skipped:
                self._skipped.labels(self.group, skipped.topic, str(skipped.partition)).inc(skipped.count)
            for topic, reasons in report.quarantined.items():
                for reason, count in reasons.items():
                    self._quarantined.labels(self.group, topic, reason).inc(count)
            for topic in report.topic_errors:
                self._topic_failures.labels(self.group, topic).inc()
            self._expired.labels(self.group).inc(report.maintenance.get("partitions_expired", 0))
            self._compacted.labels(self.group).inc(report.maintenance.get("files_compacted", 0))
            if report.maintenance_error:
                self._maintenance_failures.labels(self.group).inc()

    def _set_last(self, report: RunReport) -> None:
        if report.finished_at is not None:
            self._last_run.labels(self.group).set(report.finished_at)
        self._last_rows.labels(self.group).set(report.rows)
        self._last_bytes.labels(self.group).set(report.bytes)
        if report.duration_s is not None:
            self._last_duration.labels(self.group).set(report.duration_s)
        if report.first_task_s is not None:
            self._last_first_task.labels(self.group).set(report.first_task_s)

    def serve(self, port: int, address: str) -> int:
        """Serve /metrics on ``address``:``port`` (0: any free port) until :meth:`close`; the port served."""
        self._server = serve_metrics(self.registry, address, port)
        return self._server.port

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
