"""`python -m audit report` prints each window's state, every tier's count and completeness or that it is pending
(with the lag it had), and what is named per tier; `trace` finds an event among every name a result gives it."""

from __future__ import annotations

import uuid

from audit.__main__ import main
from audit.commands import named_ids
from audit.measures import failed_measure, quarantine_measure
from audit.reconcile import TierCount, WindowKey, reconcile
from audit.results import ResultLog, result_to_json
from pipeline.auditing.sketch import EventSketch

START = 1_795_400_000_000  # 2026-11-23 02:13:20Z


def tier(ids: list[str]) -> TierCount:
    sketch = EventSketch()
    sketch.add(ids)
    return TierCount(len(ids), 10 * len(ids), sketch, 1)


def test_the_report_shows_states_pending_tiers_and_names_per_tier(tmp_path, capsys):
    ids = [str(uuid.uuid4()) for _ in range(10)]
    failed, stray = str(uuid.uuid4()), ids[0]
    named = reconcile(WindowKey("PageViewEvent", "dc1", START, START + 60_000), {
        "producer": tier(ids), failed_measure("producer"): tier([failed]), "datacenter": tier(ids),
        "offline": tier(ids), "warehouse": tier(ids[1:]), quarantine_measure("warehouse", "null value"): tier([stray])})
    pending = reconcile(WindowKey("PageViewEvent", "dc1", START + 60_000, START + 120_000), {
        "producer": tier(ids), "datacenter": tier(ids), "offline": tier(ids[:3])}, ready={"producer", "datacenter"})
    pending.pending["offline"] = {"lagRecords": 7, "waitingFor": "the audit's reader of the offline cluster"}
    ResultLog(tmp_path / "results.jsonl").append([result_to_json(r, START + 200_000) for r in (named, pending)])
    assert main(["report", "--state-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["window", "(UTC)", "topic", "dc", "state", "producer", "datacenter", "mirror",
                                "offline", "warehouse", "named"]
    assert "incomplete" in lines[1] and "11 (1.000)" in lines[1] and "9 (0.818)" in lines[1]
    assert lines[1].endswith("lost 1 at producer; quarantined 1 at warehouse (null value)")
    assert "pending" in lines[2].split() and "3 pending (lag 7)" in lines[2] and lines[2].endswith("-")
    assert named_ids(result_to_json(named, 0)) >= {failed, stray}
