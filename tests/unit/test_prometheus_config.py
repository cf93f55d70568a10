"""infra.prometheus.config and .topology: the prometheus.yml they write is what promtool accepts and scrapes the
targets given, with their labels; held rules; the demo's targets; the command line; bad input refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

from infra.prometheus.config import ALERT_RULES, RULE_FILES, Job, Target, render, write
from infra.prometheus.topology import DEMO_PROCESSES, PROMETHEUS_PORT, demo_jobs
from tests.support.broker import REPO_ROOT
from tests.support.prometheus import promtool

JOBS = [
    Job("broker", (Target("127.0.0.1:9201", {"cluster": "dc1"}), Target("127.0.0.1:9202", {"cluster": "dc1"}),
                   Target("127.0.0.1:9211", {"cluster": "dc2"}))),
    Job("mirror", (Target("127.0.0.1:9311"),)),
]


def check_config(path: Path) -> str:
    """promtool check config on ``path`` (which also checks the rule files it loads); its output."""
    return promtool("check", "config", str(path)).stdout


def test_the_written_config_passes_promtool_and_scrapes_the_targets_with_their_labels(tmp_path: Path) -> None:
    path = write(tmp_path, JOBS, scrape_interval="1s", evaluation_interval="2s")
    output = check_config(path)
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in output, output
    config = yaml.safe_load(path.read_text())
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "2s"}
    assert config["rule_files"] == [str(p) for p in RULE_FILES]
    assert config["scrape_configs"] == [
        {"job_name": "broker", "metrics_path": "/metrics", "static_configs": [
            {"targets": ["127.0.0.1:9201", "127.0.0.1:9202"], "labels": {"cluster": "dc1"}},
            {"targets": ["127.0.0.1:9211"], "labels": {"cluster": "dc2"}}]},
        {"job_name": "mirror", "metrics_path": "/metrics", "static_configs": [{"targets": ["127.0.0.1:9311"]}]},
    ]


def test_held_rules_are_copies_with_every_for_replaced(tmp_path: Path) -> None:
    path = write(tmp_path, JOBS, hold="2s")
    check_config(path)
    rule_files = [Path(p) for p in yaml.safe_load(path.read_text())["rule_files"]]
    assert [p.parent for p in rule_files] == [tmp_path / "rules"] * len(RULE_FILES)
    held = {rule["alert"]: rule for group in yaml.safe_load((tmp_path / "rules" / ALERT_RULES.name).read_text())["groups"]
            for rule in group["rules"]}
    original = {rule["alert"]: rule for group in yaml.safe_load(ALERT_RULES.read_text())["groups"]
                for rule in group["rules"]}
    assert held.keys() == original.keys()
    for name, rule in original.items():
        assert held[name] == (rule | {"for": "2s"} if "for" in rule else rule), name
    assert held["TargetDown"]["for"] == "2s" and original["TargetDown"]["for"] == "1m"


@pytest.mark.parametrize("make, message", [
    (lambda: render([Job("a", ()), Job("a", ())]), "unique"),
    (lambda: Target("127.0.0.1"), "host:port"),
    (lambda: Target("127.0.0.1:0"), "host:port"),
    (lambda: Target("127.0.0.1:x"), "host:port"),
    (lambda: Target("127.0.0.1:1", {"job": "x"}), "target label"),
    (lambda: Target("127.0.0.1:1", {"__address__": "x"}), "target label"),
    (lambda: Target("127.0.0.1:1", {"bad-name": "x"}), "target label"),
    (lambda: render(JOBS, scrape_interval="1 second"), "duration"),
    (lambda: render(JOBS, evaluation_interval=""), "duration"),
])
def test_bad_input_is_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_the_demo_topology_config_passes_promtool_with_one_port_per_process(tmp_path: Path) -> None:
    ports = [port for _, port, _ in DEMO_PROCESSES]
    assert len(ports) == len(set(ports))
    jobs = demo_jobs()
    assert {job.name for job in jobs} == {"broker", "schema-registry", "emulator", "mirror", "etl", "audit",
                                          "prometheus"}
    brokers = next(job for job in jobs if job.name == "broker").targets
    assert [(t.labels["cluster"], t.labels["broker_id"]) for t in brokers] == [
        (cluster, str(broker_id)) for cluster in ("dc1", "dc2", "offline") for broker_id in (1, 2, 3)]
    check_config(write(tmp_path, jobs))


def test_demo_jobs_keeps_only_the_ports_given() -> None:
    jobs = demo_jobs("10.0.0.1", ports={9201, 8081, PROMETHEUS_PORT})
    assert [(job.name, [t.address for t in job.targets]) for job in jobs] == [
        ("broker", ["10.0.0.1:9201"]), ("schema-registry", ["10.0.0.1:8081"]),
        ("prometheus", [f"10.0.0.1:{PROMETHEUS_PORT}"])]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra.prometheus", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)


def test_the_command_line_writes_the_demo_config_plus_the_targets_given(tmp_path: Path) -> None:
    result = run_cli("--out", str(tmp_path), "--demo", "--target", "broker=127.0.0.1:9999,cluster=dc9",
                     "--target", "other=127.0.0.1:9998", "--scrape-interval", "5s", "--hold", "3s")
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path == tmp_path / "prometheus.yml"
    check_config(path)
    configs = {c["job_name"]: c["static_configs"] for c in yaml.safe_load(path.read_text())["scrape_configs"]}
    assert configs["broker"][-1] == {"targets": ["127.0.0.1:9999"], "labels": {"cluster": "dc9"}}
    assert configs["other"] == [{"targets": ["127.0.0.1:9998"]}]
    assert len(configs) == len({job.name for job in demo_jobs()}) + 1


@pytest.mark.parametrize("args, message", [
    ((), "nothing to scrape"),
    (("--target", "broker"), "JOB=HOST:PORT"),
    (("--target", "broker=127.0.0.1:1,cluster"), "JOB=HOST:PORT"),
    (("--target", "broker=localhost"), "host:port"),
    (("--demo", "--hold", "soon"), "duration"),
])
def test_the_command_line_refuses_bad_input_in_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = run_cli("--out", str(tmp_path), *args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("python -m infra.prometheus: error:")
    assert message in result.stderr
    assert not (tmp_path / "prometheus.yml").exists()
