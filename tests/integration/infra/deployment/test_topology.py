"""What the deployment makes of infra/topology.yml, checked by the real tools: Prometheus's targets by promtool."""

from __future__ import annotations

from pathlib import Path

from infra.deployment.programs import scrape_jobs
from infra.deployment.topology import load
from infra.prometheus.config import write
from tests.support.prometheus import promtool


def test_prometheus_scrapes_every_process_that_serves_metrics(tmp_path: Path) -> None:
    topology = load()
    jobs = {job.name: job for job in scrape_jobs(topology)}
    assert set(jobs) == {"broker", "schema-registry", "emulator", "mirror", "etl", "audit", "prometheus"}
    assert [(t.address, dict(t.labels)) for t in jobs["broker"].targets][:2] == [
        ("127.0.0.1:9201", {"cluster": "dc1", "broker_id": "1"}), ("127.0.0.1:9202", {"cluster": "dc1", "broker_id": "2"})]
    assert [dict(t.labels) for t in jobs["emulator"].targets] == [{"datacenter": "dc1"}, {"datacenter": "dc2"}]
    promtool("check", "config", str(write(tmp_path, list(jobs.values()))))
