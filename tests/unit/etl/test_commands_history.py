"""`python -m etl history` (and the scheduler's, `run`, command line settings) through the subcommand functions."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from etl.commands import add_history_parser, add_run_parser, run_config
from etl.schedule import one_line
from pipeline.etl_runs import FAILED, SUCCEEDED, RangeReport, RunHistory, RunReport, SkippedOffsets


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m etl")
    subparsers = parser.add_subparsers(required=True)
    add_run_parser(subparsers)
    add_history_parser(subparsers)
    return parser.parse_args(argv)


def history(argv: list[str]) -> tuple[int, str]:
    args = parse(["history", *argv])
    out = io.StringIO()
    return args.command(args, out=out), out.getvalue()


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    recorded = RunHistory(tmp_path, "etl")
    good = RunReport(run_id="run-ok", group="etl", started_at=1_700_000_000.0,
                     ranges=[RangeReport("page-views", 0, 0, 1500, 1500, 3 << 20), RangeReport("clicks", 1, 5, 9, 4, 400)],
                     skipped=[SkippedOffsets("clicks", 1, 0, 5)],
                     quarantined={"clicks": {"null value": 2, "unknown schema id": 1}})
    good.finish(SUCCEEDED, 1_700_000_042.5)
    bad = RunReport(run_id="run-bad", group="etl", started_at=1_700_000_300.0)
    bad.finish(FAILED, 1_700_000_301.0, "page-views-0: 120 offsets lost to retention\njava stack line")
    recorded.record(good)
    recorded.record(bad)
    other = RunReport(run_id="run-other-group", group="other", started_at=1_700_000_400.0)
    other.finish(SUCCEEDED, 1_700_000_401.0)
    RunHistory(tmp_path, "other").record(other)
    return tmp_path


def test_the_table_shows_each_run_newest_first_on_one_line(warehouse: Path) -> None:
    code, text = history(["--warehouse", str(warehouse)])
    assert code == 0
    header, newest, oldest = text.splitlines()
    assert header.split() == ["started", "run", "id", "outcome", "ranges", "rows", "bytes", "duration", "skipped",
                              "quarantined", "error"]
    assert newest.split()[:9] == ["2023-11-14", "22:18:20Z", "run-bad", "failed", "0", "0", "0", "B", "1.0s"]
    assert newest.endswith("0            0  page-views-0: 120 offsets lost to retention")
    assert oldest.split() == ["2023-11-14", "22:13:20Z", "run-ok", "succeeded", "2", "1504", "3.0", "MB", "42.5s",
                              "5", "3"]


def test_limit_group_and_json(warehouse: Path) -> None:
    code, text = history(["--warehouse", str(warehouse), "--limit", "1", "--json"])
    assert code == 0
    [run] = json.loads(text)
    assert run["run_id"] == "run-bad" and run["outcome"] == "failed" and run["duration_s"] == 1.0
    code, text = history(["--warehouse", str(warehouse), "--group", "other", "--json"])
    assert [run["run_id"] for run in json.loads(text)] == ["run-other-group"]
    _, text = history(["--warehouse", str(warehouse), "--json"])
    assert json.loads(text)[1]["rows"] == 1504 and json.loads(text)[1]["skipped"][0]["start"] == 0
    assert json.loads(text)[1]["quarantined"] == {"clicks": {"null value": 2, "unknown schema id": 1}}
    assert json.loads(text)[1]["quarantined_records"] == 3 and json.loads(text)[1]["topic_errors"] == {}


def test_warehouse_and_group_from_a_properties_file(warehouse: Path, tmp_path: Path) -> None:
    properties = tmp_path / "etl.properties"
    properties.write_text(f"warehouse.dir={warehouse}\ngroup.id=other\nzookeeper.connect=zk:2181\n")
    code, text = history(["--config", str(properties), "--json"])
    assert code == 0 and [run["run_id"] for run in json.loads(text)] == ["run-other-group"]


def test_no_warehouse_or_a_bad_limit_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert history([])[0] == 2
    assert "--warehouse" in capsys.readouterr().err
    assert history(["--warehouse", str(tmp_path), "--limit", "0"])[0] == 2
    code, text = history(["--warehouse", str(tmp_path / "empty")])
    assert code == 0 and text == "" and "no runs recorded" in capsys.readouterr().err


def test_schedule_options_override_the_file_and_set(tmp_path: Path) -> None:
    properties = tmp_path / "etl.properties"
    properties.write_text("zookeeper.connect=zk:2181/offline\nwarehouse.dir=/file\nschedule.every=1h\n")
    config = run_config(parse(["run", "--config", str(properties), "--set", "schedule.every=10m",
                                    "--set", "history.keep=7", "--warehouse", "/cli", "--every", "30s",
                                    "--metrics-port", "9464", "--group", "g2", "--master", "local[2]",
                                    "--metrics-host", "127.0.0.1", "--set", "spark.executor.memory=2g"]))
    assert config["schedule.every"] == 30.0 and config["warehouse.dir"] == "/cli" and config["history.keep"] == 7
    assert config["metrics.port"] == 9464 and config["group.id"] == "g2" and config["spark.master"] == "local[2]"
    assert config["zookeeper.connect"] == "zk:2181/offline" and config["metrics.host"] == "127.0.0.1"
    assert config.spark_settings == {"spark.executor.memory": "2g"}


def test_schedule_with_wrong_settings_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["run", "--zookeeper", "zk:2181", "--warehouse", "/w", "--every", "soon"])
    assert args.command(args) == 2
    assert "schedule.every" in capsys.readouterr().err


def test_one_line_keeps_an_errors_first_line() -> None:
    assert one_line("  Py4JJavaError: boom\n\tat org.apache.spark...\n") == "Py4JJavaError: boom"
    assert one_line("") == ""
