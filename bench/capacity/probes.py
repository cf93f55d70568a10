"""What the benchmark asks the running deployment: Prometheus's instant and range queries (the lag of every
consumer tier, the emulators' counters, the audit's latency histograms) and the audit's reconciled windows."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any, Iterable, Mapping

from infra.deployment.programs import HttpAccess, http_get
from infra.deployment.topology import Topology

__all__ = ["ALLOWANCE_PERIODS", "ETL_RUN_QUERIES", "LAG_QUERIES", "LATENCY_TIERS", "Prometheus", "audit_windows",
           "window_tier_states"]

#: Records each consumer tier has yet to read or commit past, all partitions together.
LAG_QUERIES = {
    "mirror": "sum(mirror_lag_records)",
    "etl": 'sum(kafka_consumergroup_lag{group="etl"})',
    "audit": "sum(audit_reader_lag_records)",
}
#: Per tier, the lag it may have at any time without falling behind, in seconds of its schedule: the ETL's
#: grows for a period between runs and through a run as long (added to --slack-seconds).
ALLOWANCE_PERIODS = {"etl": 2.0}
#: The ETL's runs over a range (format with seconds=...): how many ended, the longest.
ETL_RUN_QUERIES = {"runs": "sum(increase(etl_runs_total[{seconds}s]))",
                   "longest_s": "max(max_over_time(etl_last_run_duration_seconds[{seconds}s]))"}
#: The tiers the audit measures the latency from event time to.
LATENCY_TIERS = ("mirror", "offline", "warehouse")
TIMEOUT_S = 10.0


class Prometheus:
    """The deployment's Prometheus server's HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str, **parameters: Any) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({key: str(value) for key, value in parameters.items()})
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=TIMEOUT_S) as answer:
            return json.loads(answer.read())["data"]["result"]

    def value(self, query: str, at: float) -> float | None:
        """The single value of ``query`` at epoch seconds ``at`` (None: no series, or NaN)."""
        result = self._get("/api/v1/query", query=query, time=at)
        if not result:
            return None
        value = float(result[0]["value"][1])
        return None if value != value else value

    def wait_scraped_since(self, at: float, timeout_s: float, poll_s: float = 1.0) -> bool:
        """Wait until every target was scraped at epoch seconds ``at`` or later (at most ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            oldest = self.value("min(timestamp(up))", time.time())
            if oldest is not None and oldest >= at:
                return True
            time.sleep(poll_s)
        return False

    def series(self, query: str, start: float, end: float, step: str) -> list[tuple[float, float]]:
        """(epoch seconds, value) of ``query`` from ``start`` to ``end`` every ``step`` (a Prometheus duration such
        as 15s; the first series)."""
        result = self._get("/api/v1/query_range", query=query, start=start, end=end, step=step)
        if not result:
            return []
        return [(float(t), float(v)) for t, v in result[0]["values"] if float(v) == float(v)]

    def latency(self, at: float, seconds: int) -> dict[str, dict[str, float | None]]:
        """tier -> p50 and p99 seconds from event time to the tier, of the events of the ``seconds`` before
        ``at``."""
        found: dict[str, dict[str, float | None]] = {tier: {"p50": None, "p99": None} for tier in LATENCY_TIERS}
        for q in (0.5, 0.99):
            query = (f"histogram_quantile({q}, sum by (le, tier) "
                     f"(increase(audit_tier_latency_seconds_bucket[{seconds}s])))")
            for series in self._get("/api/v1/query", query=query, time=at):
                tier = series["metric"].get("tier")
                value = float(series["value"][1])
                if tier in found:
                    found[tier][f"p{int(q * 100)}"] = None if value != value else round(value, 3)
        return found


def audit_windows(topology: Topology, since_ms: int) -> list[dict[str, Any]]:
    """The audit's reconciled windows starting at ``since_ms`` or later (its /api/windows)."""
    url = f"{topology.dashboard_url}api/windows?since={since_ms}"
    return json.loads(http_get(url, HttpAccess.of(topology)))["windows"]


def window_tier_states(windows: Iterable[Mapping[str, Any]], start_ms: int, end_ms: int) -> list[dict[str, str]]:
    """The state per tier of every window overlapping [start_ms, end_ms), all topics and datacenters."""
    return [dict(window.get("tierStates") or {}) for window in windows
            if window["windowStart"] < end_ms and window["windowEnd"] > start_ms]
