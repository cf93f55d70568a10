"""infra.prometheus.config: the prometheus.yml it writes is what promtool accepts and scrapes the targets given,
with their labels; held rules; the command line; bad input refused. (The deployment's own targets are tested in
test_deployment_topology.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

from infra.prometheus.config import ALERT_RULES, RULE_FILES, Job, ScrapeLogin, Target, render, write
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


def test_a_secured_target_is_scraped_over_https_with_a_login_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("")
    (tmp_path / "password").write_text("secret")
    job = Job("audit", (Target("127.0.0.1:8090"),), scheme="https", ca_file=str(tmp_path / "ca.pem"),
              login=ScrapeLogin("prometheus", str(tmp_path / "password")))
    path = write(tmp_path, [job])
    check_config(path)
    assert "secret" not in path.read_text()
    assert yaml.safe_load(path.read_text())["scrape_configs"] == [
        {"job_name": "audit", "metrics_path": "/metrics", "scheme": "https",
         "tls_config": {"ca_file": str(tmp_path / "ca.pem")},
         "basic_auth": {"username": "prometheus", "password_file": str(tmp_path / "password")},
         "static_configs": [{"targets": ["127.0.0.1:8090"]}]}]


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


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra.prometheus", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)


def test_the_command_line_writes_the_config_of_the_targets_given(tmp_path: Path) -> None:
    result = run_cli("--out", str(tmp_path), "--target", "broker=127.0.0.1:9999,cluster=dc9",
                     "--target", "other=127.0.0.1:9998", "--scrape-interval", "5s", "--hold", "3s")
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path == tmp_path / "prometheus.yml"
    check_config(path)
    configs = {c["job_name"]: c["static_configs"] for c in yaml.safe_load(path.read_text())["scrape_configs"]}
    assert configs["broker"] == [{"targets": ["127.0.0.1:9999"], "labels": {"cluster": "dc9"}}]
    assert configs["other"] == [{"targets": ["127.0.0.1:9998"]}]
    assert len(configs) == 2


@pytest.mark.parametrize("args, message", [
    ((), "nothing to scrape"),
    (("--target", "broker"), "JOB=HOST:PORT"),
    (("--target", "broker=127.0.0.1:1,cluster"), "JOB=HOST:PORT"),
    (("--target", "broker=localhost"), "host:port"),
    (("--target", "mirror=127.0.0.1:9311", "--hold", "soon"), "duration"),
])
def test_the_command_line_refuses_bad_input_in_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = run_cli("--out", str(tmp_path), *args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("python -m infra.prometheus: error:")
    assert message in result.stderr
    assert not (tmp_path / "prometheus.yml").exists()
