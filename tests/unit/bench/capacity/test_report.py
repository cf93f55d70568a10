"""The report: the keep-up verdict per tier from a step's figures and its windows, the highest rate each tier kept
up with, and the table (markdown and JSON) and plot written."""

from __future__ import annotations

import importlib
import json

report = importlib.import_module("bench.capacity.report")

COMPLETE = {tier: "complete" for tier in ("producer", "datacenter", "mirror", "offline", "warehouse")}


def _step(rate: float, *, achieved: float | None = None, mirror: bool | None = True, etl: bool | None = True,
          audit: bool | None = True) -> dict:
    return {"rate": rate, "achieved_rate": rate if achieved is None else achieved, "start": 0.0, "end": 150.0,
            "seconds": 150.0, "cpu_cores": {"mirror": 0.3, "broker-dc1": 0.2}, "cpu_total": 0.5,
            "us_per_event": {"mirror": 300.0, "broker-dc1": 200.0}, "us_per_event_total": 500.0,
            "rss": {"mirror": 100 << 20, "broker-dc1": 200 << 20}, "rss_total": 300 << 20,
            "lag": {"mirror": {"samples": 10, "max": 40.0, "last": 3.0, "growth": 0.0, "bounded": mirror},
                    "etl": {"samples": 10, "max": 60000.0, "last": 0.0, "growth": 0.0, "bounded": etl},
                    "audit": {"samples": 10, "max": 0.0, "last": 0.0, "growth": 0.0, "bounded": audit}},
            "latency": {"mirror": {"p50": 0.4, "p99": 1.2}, "offline": {"p50": 0.5, "p99": 1.5},
                        "warehouse": {"p50": 40.0, "p99": 75.0}},
            "etl_runs": {"runs": 2.0, "longest_s": 31.4}}


def test_every_tier_keeps_up_with_bounded_lag_and_complete_windows():
    assert report.keeps_up(_step(1000), [COMPLETE, COMPLETE]) == {t: True for t in report.TIER_CHECKS}


def test_a_growing_lag_fails_its_tier_only():
    verdicts = report.keeps_up(_step(1000, mirror=False), [COMPLETE])
    assert verdicts["mirror"] is False
    assert verdicts["etl"] is verdicts["datacenter"] is verdicts["emulators"] is True


def test_an_incomplete_window_fails_the_tier_it_is_incomplete_at():
    verdicts = report.keeps_up(_step(1000), [COMPLETE, {**COMPLETE, "warehouse": "short"}])
    assert verdicts["etl"] is False
    assert verdicts["mirror"] is True


def test_a_pending_window_or_missing_lag_cannot_tell():
    verdicts = report.keeps_up(_step(1000, audit=None), [{**COMPLETE, "offline": "pending"}])
    assert verdicts["mirror"] is None
    assert verdicts["audit"] is None
    assert verdicts["datacenter"] is True


def test_emulators_that_send_too_little_do_not_keep_up():
    assert report.keeps_up(_step(1000, achieved=900.0), [COMPLETE])["emulators"] is False
    assert report.keeps_up(_step(1000, achieved=960.0), [COMPLETE])["emulators"] is True


def test_highest_kept_up_per_tier():
    steps = []
    for rate, mirror in ((400, True), (4000, True), (10000, False)):
        step = _step(rate)
        step["keeps_up"] = report.keeps_up(_step(rate, mirror=mirror), [COMPLETE])
        steps.append(step)
    steps[0]["keeps_up"]["audit"] = None
    highest = report.highest_kept_up(steps)
    assert highest["mirror"] == 4000
    assert highest["etl"] == 10000
    steps_none = [{**steps[0], "keeps_up": {t: False for t in report.TIER_CHECKS}}]
    assert report.highest_kept_up(steps_none) == {t: None for t in report.TIER_CHECKS}


def _document() -> dict:
    steps = [_step(400), _step(4000, mirror=False)]
    for step in steps:
        step["keeps_up"] = report.keeps_up(step, [COMPLETE])
    return {"date": "2026-11-28T08:00:00+00:00", "topology": "infra/topology.yml", "settings": "brokers as given",
            "step_seconds": 150.0, "warmup_seconds": 30.0, "steps": steps,
            "highest_kept_up": report.highest_kept_up(steps)}


def test_the_markdown_has_a_row_per_step_and_the_verdicts():
    text = report.markdown(_document())
    rows = [line for line in text.splitlines() if line.startswith("| 4")]
    assert len(rows) == 4  # a row per step in each of the two tables
    assert "| 4,000 | 4,000 | 0.50 | 500 | 0.29 | 40 | 60,000 | 0 | 0.5/1.5 | 40.0/75.0 | 2 (31) |" in text
    assert "**no**" in rows[1]
    assert "mirror 400, audit 4,000" in text
    header = next(line for line in text.splitlines() if line.startswith("| events/s asked | sent"))
    separator = text.splitlines()[text.splitlines().index(header) + 1]
    assert header.count("|") == separator.count("|")


def test_write_puts_json_markdown_and_plot_in_the_directory(tmp_path):
    paths = report.write(_document(), tmp_path / "out")
    assert [p.name for p in paths] == ["capacity.json", "capacity.md", "capacity.png"]
    assert json.loads(paths[0].read_text())["steps"][1]["keeps_up"]["mirror"] is False
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
