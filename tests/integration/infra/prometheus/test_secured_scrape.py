"""Prometheus scrapes a secured /metrics -- the schema registry's with BASIC over HTTPS from our CA -- with the
basic_auth and tls_config infra.prometheus.config writes; without the login the target is down (401)."""

from __future__ import annotations

from pathlib import Path

from infra.prometheus.config import Job, ScrapeLogin, Target, write
from tests.support.http_security import http_security_files
from tests.support.polling import wait_until
from tests.support.prometheus import PrometheusProcess
from tests.support.registry import RegistryProcess


def health(prometheus: PrometheusProcess) -> dict[str, tuple[str, str]]:
    return {t["labels"]["job"]: (t["health"], t["lastError"]) for t in prometheus.api("targets")["activeTargets"]}


def scraped(prometheus: PrometheusProcess) -> dict[str, tuple[str, str]] | None:
    """Each job's (health, last error) once every target was scraped at least once."""
    found = health(prometheus)
    return found if all(state != "unknown" for state, _ in found.values()) else None


def test_prometheus_logs_in_to_a_secured_registry(tmp_path: Path) -> None:
    secured = http_security_files(tmp_path / "security")
    user, password = secured.logins["reader"]
    password_file = tmp_path / "security" / "prometheus.password"
    password_file.write_text(password)
    password_file.chmod(0o600)
    with RegistryProcess(tmp_path / "registry.log", data_dir=tmp_path / "data", extra_args=tuple(secured.settings()),
                         auth=secured.logins["reader"], ca_file=secured.ca_file) as registry:
        target = (Target(f"127.0.0.1:{registry.port}"),)
        jobs = [Job("schema-registry", target, scheme="https", ca_file=str(secured.ca_file),
                    login=ScrapeLogin(user, str(password_file))),
                Job("anonymous", target, scheme="https", ca_file=str(secured.ca_file))]
        config = write(tmp_path / "prometheus", jobs, scrape_interval="1s", evaluation_interval="1s")
        with PrometheusProcess(config, tmp_path / "prometheus") as prometheus:
            found = wait_until(lambda: scraped(prometheus), 30, interval=0.2,
                               message=lambda: f"both targets scraped: {health(prometheus)}")
            assert found["schema-registry"][0] == "up"
            assert found["anonymous"][0] == "down" and "401" in found["anonymous"][1]
            assert wait_until(lambda: prometheus.query('schema_registry_requests_total{endpoint="/metrics"}'), 10,
                              interval=0.2, message="the registry's metrics stored")
