"""The pipeline's Prometheus alert rules (infra/prometheus/rules/alerts.yml), as a table."""

from __future__ import annotations

from pathlib import Path

import yaml

from infra.docs.markdown import table
from infra.prometheus.config import ALERT_RULES

__all__ = ["render_alerts"]


def render_alerts(path: Path = ALERT_RULES) -> str:
    """One row per alert, in the order of the rule file: its group, severity, hold time, condition and meaning."""
    rows = []
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            annotations = rule.get("annotations", {})
            rows.append((f"`{rule['alert']}`", group["name"], rule.get("labels", {}).get("severity", ""),
                         rule.get("for", ""), f"`{' '.join(str(rule['expr']).split())}`",
                         annotations.get("description", annotations.get("summary", ""))))
    return table(("alert", "group", "severity", "for", "fires when", "meaning"), rows)
