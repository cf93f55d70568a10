"""The demo topology's scrape targets: which process of `make pipeline-up` serves /metrics on which port.

One row per process (job, metrics port, labels). The demo gives each process the port of its row
(``metrics.port`` for the brokers, ``--metrics-port`` for the emulators, the mirror and the ETL scheduler;
the schema registry and the audit service serve /metrics on their HTTP port, the audit's default 8090), and
:func:`demo_jobs` turns the rows of the processes it runs into the jobs :func:`infra.prometheus.config.write`
scrapes. Broker metrics ports are the block 92xx: 920N for broker N of dc1, 921N of dc2, 922N of the offline
cluster.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping

from infra.prometheus.config import Job, Target

__all__ = ["DEMO_PROCESSES", "PROMETHEUS_PORT", "demo_jobs"]

PROMETHEUS_PORT = 9090

# (job, metrics port, labels); the job names are what the alert rules and the dashboard select on. A target label
# must not be one the process exports itself (the ETL's group, the mirror's source): Prometheus would rename it.
DEMO_PROCESSES: tuple[tuple[str, int, Mapping[str, str]], ...] = (
    *(("broker", 9200 + broker_id, {"cluster": "dc1", "broker_id": str(broker_id)}) for broker_id in (1, 2, 3)),
    *(("broker", 9210 + broker_id, {"cluster": "dc2", "broker_id": str(broker_id)}) for broker_id in (1, 2, 3)),
    *(("broker", 9220 + broker_id, {"cluster": "offline", "broker_id": str(broker_id)}) for broker_id in (1, 2, 3)),
    ("schema-registry", 8081, {}),
    ("emulator", 9301, {"datacenter": "dc1"}),
    ("emulator", 9302, {"datacenter": "dc2"}),
    ("mirror", 9311, {}),
    ("etl", 9321, {}),
    ("audit", 8090, {}),
    ("prometheus", PROMETHEUS_PORT, {}),
)


def demo_jobs(host: str = "127.0.0.1", ports: Collection[int] | None = None,
              processes: Iterable[tuple[str, int, Mapping[str, str]]] = DEMO_PROCESSES) -> list[Job]:
    """The scrape jobs of ``processes`` on ``host``, limited to those whose port is in ``ports`` when given
    (the demo passes the ports of what it started, so that nothing it does not run counts as down)."""
    jobs: dict[str, list[Target]] = {}
    for job, port, labels in processes:
        if ports is None or port in ports:
            jobs.setdefault(job, []).append(Target(f"{host}:{port}", labels))
    return [Job(name, tuple(targets)) for name, targets in jobs.items()]
