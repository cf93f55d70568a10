"""Prometheus's configuration for the pipeline: prometheus.yml for given scrape targets, and its rule files.

The rule files (``rules/recording.yml``, ``rules/alerts.yml``) are kept as YAML beside this module, tested by
``promtool test rules`` (``tests/*.yml``). :func:`write` writes a ``prometheus.yml`` that scrapes the given jobs'
``/metrics`` and loads them; the deployment passes its processes (:func:`infra.deployment.programs.scrape_jobs`),
tests their own ports. With ``hold`` set, :func:`write` loads copies of the rules in which every ``for:`` lasts that long
instead, so that a test or a demo sees a pending alert fire in seconds rather than minutes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

__all__ = ["ALERT_RULES", "Job", "RECORDING_RULES", "RULE_FILES", "ScrapeLogin", "Target", "render", "write",
           "write_rules"]

RULES_DIR = Path(__file__).resolve().parent / "rules"
RECORDING_RULES = RULES_DIR / "recording.yml"
ALERT_RULES = RULES_DIR / "alerts.yml"
RULE_FILES = (RECORDING_RULES, ALERT_RULES)
CONFIG_NAME = "prometheus.yml"

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Prometheus's duration syntax (model.ParseDuration): units from largest to smallest, each at most once.
_DURATION = re.compile(r"([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?")


@dataclass(frozen=True)
class Target:
    """One process serving Prometheus metrics: its host:port and the labels every sample of it gets (cluster,
    datacenter, ...), besides ``job`` and ``instance``."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        host, _, port = self.address.rpartition(":")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise ValueError(f"target address {self.address!r} is not host:port")
        for name in self.labels:
            if not _LABEL_NAME.fullmatch(name) or name.startswith("__") or name in ("job", "instance"):
                raise ValueError(f"{name!r} cannot be a target label")


@dataclass(frozen=True)
class ScrapeLogin:
    """How Prometheus logs in to a secured /metrics (the schema registry's, the audit's): HTTP basic with the
    password read from ``password_file`` (never written into prometheus.yml)."""

    username: str
    password_file: str


@dataclass(frozen=True)
class Job:
    """A scrape job: processes of one kind (``up{job=...}`` is what TargetDown watches); ``scheme`` https with
    ``ca_file`` (the CA the targets' certificates are checked against) and a ``login`` for secured targets."""

    name: str
    targets: tuple[Target, ...]
    metrics_path: str = "/metrics"
    scheme: str = "http"
    ca_file: str = ""
    login: ScrapeLogin | None = None


def duration(value: str) -> str:
    """``value`` when it is a Prometheus duration (``1s``, ``1m30s``), else ValueError."""
    if not value or not _DURATION.fullmatch(value):
        raise ValueError(f"{value!r} is not a Prometheus duration (e.g. 15s, 1m, 1h30m)")
    return value


def render(jobs: Sequence[Job], rule_files: Sequence[Path] = RULE_FILES, *, scrape_interval: str = "15s",
           evaluation_interval: str = "15s") -> str:
    """The text of a prometheus.yml scraping ``jobs`` and loading ``rule_files`` (given as absolute paths)."""
    names = [job.name for job in jobs]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"job names must be unique: {', '.join(duplicated)}")
    config: dict[str, Any] = {
        "global": {"scrape_interval": duration(scrape_interval),
                   "evaluation_interval": duration(evaluation_interval)},
        "rule_files": [str(Path(path).resolve()) for path in rule_files],
        "scrape_configs": [_scrape_config(job) for job in jobs],
    }
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def _scrape_config(job: Job) -> dict[str, Any]:
    """One job's scrape_config: a static_config per distinct label set, targets in the order given."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for target in job.targets:
        groups.setdefault(tuple(sorted(target.labels.items())), []).append(target.address)
    static_configs = []
    for labels, addresses in groups.items():
        static_config: dict[str, Any] = {"targets": addresses}
        if labels:
            static_config["labels"] = dict(labels)
        static_configs.append(static_config)
    config: dict[str, Any] = {"job_name": job.name, "metrics_path": job.metrics_path}
    if job.scheme != "http":
        config["scheme"] = job.scheme
    if job.ca_file:
        config["tls_config"] = {"ca_file": str(Path(job.ca_file).resolve())}
    if job.login is not None:
        config["basic_auth"] = {"username": job.login.username,
                                "password_file": str(Path(job.login.password_file).resolve())}
    config["static_configs"] = static_configs
    return config


def write_rules(directory: Path, hold: str) -> list[Path]:
    """Copies of the rule files in ``directory`` in which every ``for:`` is ``hold``; their paths."""
    duration(hold)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for source in RULE_FILES:
        rules = yaml.safe_load(source.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = hold
        target = directory / source.name
        target.write_text(yaml.safe_dump(rules, sort_keys=False))
        written.append(target)
    return written


def write(directory: Path, jobs: Sequence[Job], *, scrape_interval: str = "15s", evaluation_interval: str = "15s",
          hold: str | None = None) -> Path:
    """Write ``directory``/prometheus.yml for ``jobs`` (and, with ``hold``, the held rule copies under
    ``directory``/rules); its path, for ``prometheus --config.file``."""
    directory.mkdir(parents=True, exist_ok=True)
    rule_files = RULE_FILES if hold is None else write_rules(directory / "rules", hold)
    path = directory / CONFIG_NAME
    path.write_text(render(jobs, rule_files, scrape_interval=scrape_interval, evaluation_interval=evaluation_interval))
    return path
