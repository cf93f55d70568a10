"""The audit's window gauges kept up window by window (a result replaced, a window dropped at retention) read the
same as computed afresh from every retained result."""

from __future__ import annotations

import random

from audit.metrics import AuditMetrics
from audit.reconcile import Discrepancy, WindowKey, WindowResult

TIERS = ("producer", "datacenter", "mirror")


def result(rng: random.Random, topic: str, datacenter: str, start: int) -> WindowResult:
    produced = rng.randint(1, 5)
    counts = {"producer": produced, **{t: produced - rng.choice([0, 0, 1]) for t in TIERS[1:]}}
    completeness = {t: c / produced for t, c in counts.items()}
    discrepancies = [Discrepancy("producer", "datacenter", duplicated={"e": 1})] if rng.random() < 0.2 else []
    return WindowResult(WindowKey(topic, datacenter, start, start + 10), counts, completeness, discrepancies)


def gauges(metrics: AuditMetrics) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in metrics.registry.collect()
            if family.name in ("audit_incomplete_windows", "audit_window_completeness_ratio")
            for s in family.samples}


def test_gauges_kept_window_by_window_equal_those_computed_from_every_result():
    rng = random.Random(7)
    incremental, retained = AuditMetrics(), {}
    incremental.set_windows([], 0.999)
    for step in range(600):
        start = 10 * rng.randint(step // 10, step // 10 + 5)
        if rng.random() < 0.1 and retained:
            key = min(retained, key=lambda k: k.window_start)
            incremental.window_changed(retained.pop(key), None)
            continue
        new = result(rng, rng.choice(["A", "B"]), rng.choice(["dc1", "dc2"]), start)
        incremental.window_changed(retained.get(new.key), new)
        retained[new.key] = new
    afresh = AuditMetrics()
    afresh.set_windows(list(retained.values()), 0.999)
    assert gauges(incremental) == gauges(afresh)
