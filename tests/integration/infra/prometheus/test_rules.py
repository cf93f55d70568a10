"""The Prometheus rules (infra/prometheus/rules): valid for promtool, every alert shown firing and not firing by
the promtool unit tests (infra/prometheus/tests), and every metric they read exported under that name by the
component that owns it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from audit.metrics import AuditMetrics
from etl.metrics import EtlMetrics
from infra.prometheus.config import ALERT_RULES, RECORDING_RULES, RULE_FILES
from mirror.metrics import MirrorMetrics
from producers.metrics import EmulatorMetrics
from schemas.registry.service import Metrics as RegistryMetrics
from tests.support.prometheus import exported_names, metric_names_read, promtool, rules

PROMTOOL_TESTS = sorted((ALERT_RULES.parent.parent / "tests").glob("*.yml"))


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def alert_names() -> list[str]:
    return [rule["alert"] for rule in rules(ALERT_RULES)]


def test_the_rule_files_pass_promtool_check_rules() -> None:
    output = promtool("check", "rules", *map(str, RULE_FILES)).stdout
    assert output.count("SUCCESS") == len(RULE_FILES), output


def test_the_promtool_unit_tests_pass() -> None:
    assert len(PROMTOOL_TESTS) >= 2, PROMTOOL_TESTS
    output = promtool("test", "rules", *map(str, PROMTOOL_TESTS)).stdout
    assert output.count("SUCCESS") == len(PROMTOOL_TESTS), output


def test_the_promtool_unit_tests_fail_when_an_expected_alert_does_not_fire(tmp_path: Path) -> None:
    # The same test run against alert rules that never fire must fail: the tests do look at the alerts.
    never = load(ALERT_RULES)
    for group in never["groups"]:
        for rule in group["rules"]:
            rule["expr"] = "vector(1) == 0"
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / ALERT_RULES.name).write_text(yaml.safe_dump(never))
    for path in RULE_FILES:
        if path != ALERT_RULES:
            (tmp_path / "rules" / path.name).write_text(path.read_text())
    (tmp_path / "tests").mkdir()
    for path in PROMTOOL_TESTS:
        (tmp_path / "tests" / path.name).write_text(path.read_text())
    with pytest.raises(AssertionError, match="FAILED"):
        promtool("test", "rules", *(str(tmp_path / "tests" / path.name) for path in PROMTOOL_TESTS))


def test_every_alert_has_a_promtool_test_where_it_fires_and_one_where_it_does_not() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in PROMTOOL_TESTS:
        for case in load(path)["tests"]:
            for check in case.get("alert_rule_test", ()):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alert_names(), "no alert rules found"
    assert sorted(set(alert_names()) - firing) == [], "alerts never shown firing"
    assert sorted(set(alert_names()) - quiet) == [], "alerts never shown quiet"
    assert sorted((firing | quiet) - set(alert_names())) == [], "tests of alerts that do not exist"


def test_the_brief_s_alerts_exist() -> None:
    assert set(alert_names()) >= {
        "AuditWindowIncomplete", "AuditEventsLost", "AuditEventsDuplicated", "TargetDown", "KafkaOfflinePartitions",
        "KafkaNoActiveController", "MirrorLagHigh", "EtlRunFailed", "EtlLastSuccessTooOld", "EmulatorSendFailures"}


def test_every_recording_rule_is_named_level_metric_operations() -> None:
    names = [rule["record"] for rule in rules(RECORDING_RULES)]
    assert names and all(re.fullmatch(r"[a-z_]+:[a-z0-9_]+(:[a-z0-9_]+)?", name) for name in names), names


# The components whose registries stand alone; the broker's (kafka_...) are checked on a live broker
# (tests/integration/infra/prometheus/test_live.py).
EXPORTERS = {
    "audit_": lambda: AuditMetrics().registry,
    "mirror_": lambda: MirrorMetrics().registry,
    "emulator_": lambda: EmulatorMetrics().registry,
    "etl_": lambda: EtlMetrics("etl").registry,
    "schema_registry_": lambda: RegistryMetrics().registry,
}


@pytest.mark.parametrize("prefix", sorted(EXPORTERS))
def test_the_rules_read_only_metrics_the_component_exports(prefix: str) -> None:
    read = metric_names_read(prefix)
    assert read, f"no rule reads a {prefix}... metric"
    assert sorted(read - exported_names(EXPORTERS[prefix]().collect())) == []
