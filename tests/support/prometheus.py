"""Debian's Prometheus in tests: ``promtool`` runs and a real ``prometheus`` server on a free loopback port.

Both binaries come with the Debian package ``prometheus`` that ``make setup`` installs; when one is missing
the test fails saying so (it is never skipped). ``PrometheusProcess`` starts the server on a given
configuration with its TSDB in a temporary directory and answers HTTP API queries (/api/v1/...).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml
from prometheus_client import Metric

from infra.prometheus.config import RULE_FILES
from tests.support.ports import free_port
from tests.support.process import ChildProcess

__all__ = ["PrometheusProcess", "binary", "exported_names", "metric_names_read", "promtool", "rules"]

INSTALL_HINT = "install Debian's prometheus package: `make setup` (infra/install-debian-packages.sh prometheus)"
# The words of a PromQL expression that are not functions (followed by '(') nor parts of a recorded name (':');
# label names are words too, but none starts with a component's prefix.
WORD = re.compile(r"(?<![:\w])[a-z_][a-z0-9_]*(?![\w:(])")


def rules(path: Path) -> Iterator[dict[str, Any]]:
    """The rules of a rule file, every group's in order."""
    for group in yaml.safe_load(path.read_text())["groups"]:
        yield from group["rules"]


def metric_names_read(prefix: str) -> set[str]:
    """The names starting with ``prefix`` (a component's: ``mirror_``, ``kafka_``) that the rules' expressions read."""
    return {name for path in RULE_FILES for rule in rules(path) for name in WORD.findall(rule["expr"])
            if name.startswith(prefix)}


def exported_names(families: Iterable[Metric]) -> set[str]:
    """Every sample name of these metric families (a registry's ``collect()``, a scrape parsed by
    ``text_string_to_metric_families``), including those of labelled families that have no child yet."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {family.name + suffix for family in families for suffix in suffixes[family.type]}


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; AssertionError naming the package when it is not installed."""
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} is not on PATH: {INSTALL_HINT}")
    return path


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``promtool ARGS``; AssertionError with its output unless it exits 0."""
    result = subprocess.run([binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"promtool {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


class PrometheusProcess:
    """One ``prometheus`` server on 127.0.0.1 and a free port, its data and log under ``directory``."""

    def __init__(self, config_file: Path, directory: Path) -> None:
        self.config_file = config_file
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / "prometheus.log"
        self.child: ChildProcess | None = None

    def start(self, timeout: float = 30.0) -> "PrometheusProcess":
        """Start the server and wait until it says it is ready."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.child = ChildProcess("prometheus", [
            binary("prometheus"), f"--config.file={self.config_file}", f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}"], self.log_path, cwd=None, error=AssertionError)
        self.child.start(self.ready, timeout, interval=0.1)
        return self

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return None if self.child is None else self.child.process

    def ready(self) -> bool:
        """Whether /-/ready answers 200; AssertionError with the log's tail once the process exited."""
        if self.child is None or not self.child.running:
            raise AssertionError(f"prometheus is not running:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful HTTP API answer (``api("query", query="up")``)."""
        query = "?" + urllib.parse.urlencode(params) if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector ``expression`` evaluates to now: [{"metric": {...}, "value": [time, "text"]}]."""
        data = self.api("query", query=expression)
        assert data["resultType"] == "vector", data
        return data["result"]

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The active (pending or firing) alerts called ``name``."""
        return [alert for alert in self.api("alerts")["alerts"] if alert["labels"].get("alertname") == name]

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; the exit code, None if it never started. Past ``timeout`` it is killed and an
        AssertionError raised: Prometheus stops in well under a second."""
        if self.child is None:
            return None
        return self.child.stop(timeout)

    def __enter__(self) -> "PrometheusProcess":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
