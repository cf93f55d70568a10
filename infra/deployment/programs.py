"""Every process of the deployment: its command line, start stage, health check and Prometheus target.

:func:`programs` turns a :class:`~infra.deployment.topology.Topology` into :class:`Program` rows, in start order.
The supervisor configuration (:mod:`infra.deployment.supervisor`), the start sequence
(:mod:`infra.deployment.lifecycle`), ``status``, ``chaos`` and Prometheus's scrape targets all read these rows,
so a process is described once. With ``security: on`` a program that has settings to keep secret gets
``--config var/secrets/services/NAME.properties``, written by ``up`` from its ``secured`` settings
(:mod:`infra.deployment.secured`); the registry's and the dashboard's health checks then go over HTTPS as admin.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from infra.deployment import secured
from infra.deployment.secrets import ADMIN, PROMETHEUS, Secrets
from infra.deployment.topology import ClusterSpec, Topology
from infra.prometheus.config import Job, ScrapeLogin, Target
from schemas.events import EVENT_TOPICS

__all__ = ["Health", "Program", "STAGES", "broker_log_dir", "programs", "scrape_jobs"]

# Start stages, in order; a stage starts once every program of the stage before answers its health check.
# supervisord stops programs in the reverse order of their priority, which follows the stages. ``up`` starts the
# loaders (the ETL) once the first events reached the offline cluster: its first run then has something to load.
STAGES = ("zookeeper", "brokers", "registry", "services", "sources", "loaders")
HTTP_TIMEOUT_S = 2.0
# The jobs whose targets serve HTTPS with basic authentication when the deployment is secured.
HTTPS_JOBS = ("schema-registry", "audit")
# supervisord notes a start in whole seconds; a registration a moment later is this life's
CLOCK_SLACK_S = 1.0


@dataclass(frozen=True)
class Health:
    """How to tell that a started program serves: a description and a check that never raises, given when the
    process was started (epoch seconds; 0 when not known), so that what a previous life of the program left
    behind (a broker's registration waiting for its session to expire) is not taken for this one."""

    description: str
    check: Callable[[float], bool]

    def __call__(self, since: float = 0.0) -> bool:
        return bool(self.check(since))


@dataclass(frozen=True)
class Program:
    """One supervised process of the deployment."""

    name: str
    command: tuple[str, ...]
    stage: str
    health: Health
    stop_wait_s: int = 30
    # (job, port, labels) of its Prometheus /metrics, the job names the alert rules select on
    metrics: tuple[str, int, Mapping[str, str]] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    kind: str = ""
    # exit statuses of a clean stop (Java exits 143 on SIGTERM)
    exit_codes: tuple[int, ...] = (0,)
    # security on: the settings of its --config file (var/secrets/services/NAME.properties), from the secrets
    secured: Callable[[Secrets], Mapping[str, str]] | None = None

    @property
    def priority(self) -> int:
        return 100 * (STAGES.index(self.stage) + 1)


@dataclass(frozen=True)
class HttpAccess:
    """How the deployment's tools reach its HTTPS services: trusting its CA, as a user of the users files."""

    ca_file: str
    user: str
    password: str

    def __repr__(self) -> str:
        return f"HttpAccess(ca={self.ca_file!r}, user={self.user!r})"

    @classmethod
    def of(cls, topology: Topology) -> "HttpAccess | None":
        """As admin when ``topology`` is secured (None otherwise, or while its secrets are not written yet)."""
        if not topology.security:
            return None
        secrets = Secrets.of(topology)
        try:
            return cls(str(secrets.ca_file), ADMIN, secrets.password(ADMIN))
        except (OSError, ValueError, KeyError):
            return None


def http_get(url: str, access: HttpAccess | None = None, timeout_s: float = HTTP_TIMEOUT_S) -> bytes:
    """The body of GET ``url`` (over HTTPS as ``access`` says); urllib's errors for anything but success."""
    request = urllib.request.Request(url)
    context = None
    if access is not None:
        if access.user:
            token = base64.b64encode(f"{access.user}:{access.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cafile=access.ca_file) if url.startswith("https:") else None
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:
        return answer.read()


def http_ok(url: str, access: HttpAccess | None = None) -> bool:
    """Whether GET ``url`` answers 200 now."""
    try:
        http_get(url, access)
        return True
    except (urllib.error.URLError, OSError, ValueError, ssl.SSLError):
        return False


def zookeeper_serves(host: str, port: int) -> bool:
    from pipeline.zk.server import four_letter_word

    return "Mode:" in four_letter_word(host, port, "srvr")


def broker_registered(zookeeper: str, broker_id: int, since: float = 0.0) -> bool:
    """Whether ``/brokers/ids/<broker_id>`` exists under the cluster's chroot (the broker joined its cluster),
    registered at ``since`` (epoch seconds) or later: a killed broker's node stays until its session expires."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from pipeline.zk.client import split_connect_string

    hosts, chroot = split_connect_string(zookeeper)
    client = KazooClient(hosts=hosts, timeout=3.0, connection_retry={"max_tries": 0})
    try:
        client.start(timeout=3.0)
        data, _ = client.get(f"{chroot}/brokers/ids/{broker_id}")
        registered_ms = int(json.loads(data)["timestamp"])
        return registered_ms >= (since - CLOCK_SLACK_S) * 1000
    except (KazooTimeoutError, KazooException, ValueError, KeyError, TypeError):
        return False
    finally:
        client.stop()
        client.close()


def _python(module: str, *arguments: str) -> tuple[str, ...]:
    return (sys.executable, "-m", module, *arguments)


def _settings(flag: str, settings: Mapping[str, str]) -> list[str]:
    return [argument for key, value in settings.items() for argument in (flag, f"{key}={value}")]


def _config(topology: Topology, name: str) -> list[str]:
    """``--config FILE`` of program ``name`` when the deployment is secured."""
    return ["--config", str(secured.service_config(topology, name))] if topology.security else []


def _metrics_health(host: str, port: int) -> Health:
    url = f"http://{host}:{port}/metrics"
    return Health(f"{url} answers", lambda since: http_ok(url))


def zookeeper_programs(topology: Topology) -> list[Program]:
    spec, host = topology.zookeeper, topology.host
    peers = spec.peers()
    found = []
    for index, port in enumerate(spec.client_ports()):
        arguments = ["--exec", "--data-dir", str(topology.var_dir / "zookeeper" / f"zk{index + 1}"), "--host", host,
                     "--port", str(port), "--tick-ms", str(spec.tick_ms), "--snapshots-kept", str(spec.snapshots_kept),
                     "--purge-interval-hours", str(spec.purge_interval_hours)]
        if peers:
            arguments += ["--server-id", str(index + 1),
                          "--peers", ",".join(f"{sid}:{peer}:{election}" for sid, peer, election in peers)]
        found.append(Program(f"zookeeper-{index + 1}", _python("pipeline.zk.server", *arguments), "zookeeper",
                             Health(f"{host}:{port} answers srvr with a Mode",
                                    lambda since, port=port: zookeeper_serves(host, port)),
                             stop_wait_s=15, kind="zookeeper", exit_codes=(0, 143)))
    return found


def broker_log_dir(topology: Topology, cluster: ClusterSpec, broker_id: int) -> Path:
    """The log directory of broker ``broker_id`` of ``cluster``."""
    return topology.var_dir / "data" / cluster.name / f"broker-{broker_id}"


def broker_programs(topology: Topology, cluster: ClusterSpec) -> list[Program]:
    zookeeper = topology.cluster_zookeeper(cluster)
    found = []
    for broker_id in cluster.broker_ids():
        overrides = {"zookeeper.connect": zookeeper, "broker.id": str(broker_id),
                     "num.partitions": str(cluster.partitions),
                     "metrics.port": str(cluster.broker_metrics_port(broker_id)), **cluster.broker_defaults(),
                     **cluster.settings}
        name = f"broker-{cluster.name}-{broker_id}"
        command = _python("broker", "--log-dir", str(broker_log_dir(topology, cluster, broker_id)),
                          "--host", topology.host, "--port", str(cluster.broker_port(broker_id)),
                          *_config(topology, name), *_settings("--override", overrides))
        found.append(Program(
            name, command, "brokers",
            Health(f"broker {broker_id} registered under {zookeeper}",
                   lambda since, broker_id=broker_id: broker_registered(zookeeper, broker_id, since)),
            stop_wait_s=60,
            metrics=("broker", cluster.broker_metrics_port(broker_id), {"cluster": cluster.name,
                                                                         "broker_id": str(broker_id)}),
            kind="broker",
            secured=lambda secrets, broker_id=broker_id: secured.broker_settings(topology, secrets, cluster,
                                                                                 broker_id)))
    return found


def registry_program(topology: Topology) -> list[Program]:
    if topology.registry.external:
        return []
    url = topology.registry_url
    command = _python("schemas.registry", "--zookeeper", topology.registry_zookeeper, "--host", topology.host,
                      "--port", str(topology.registry.port), *_config(topology, "registry"))
    health = Health(f"{url}/subjects answers",
                    lambda since: http_ok(f"{url}/subjects", HttpAccess.of(topology)))
    return [Program("registry", command, "registry", health,
                    metrics=("schema-registry", topology.registry.port, {}), kind="registry",
                    secured=lambda secrets: secured.registry_settings(topology, secrets))]


def prometheus_program(topology: Topology) -> list[Program]:
    if topology.prometheus.external:
        return []
    url = topology.prometheus_url
    directory = topology.var_dir / "prometheus"
    command = ("prometheus", f"--config.file={directory / 'prometheus.yml'}",
               f"--storage.tsdb.path={directory / 'data'}",
               f"--storage.tsdb.retention.time={topology.prometheus.retention_time}",
               f"--storage.tsdb.retention.size={topology.prometheus.retention_size}B",
               f"--web.listen-address={topology.host}:{topology.prometheus.port}", "--log.level=warn")
    health = Health(f"{url}/-/ready answers", lambda since: http_ok(f"{url}/-/ready"))
    return [Program("prometheus", command, "services", health,
                    metrics=("prometheus", topology.prometheus.port, {}), kind="prometheus")]


def audit_program(topology: Topology) -> Program:
    spec = topology.audit
    settings = {"warehouse.dir": str(topology.warehouse), "prometheus.url": topology.prometheus_url,
                "http.host": topology.host, "retain.ms": str(spec.retain_hours * 3_600_000), **spec.settings}
    command = _python("audit", "run",
                      *[f"--datacenter={dc.name}={topology.cluster_zookeeper(dc)}" for dc in topology.datacenters],
                      "--offline", topology.cluster_zookeeper(topology.offline),
                      "--state-dir", str(topology.audit_state_dir), "--http-port", str(spec.http_port),
                      "--registry", topology.registry_url, "--window-ms", str(spec.window_ms),
                      "--grace-ms", str(spec.grace_ms), *_config(topology, "audit"), *_settings("--set", settings))
    health = f"{topology.dashboard_url}api/health"
    # 503 once a reader of the audit stopped (the service is going down): not healthy
    return Program("audit", command, "services",
                   Health(f"{health} answers", lambda since: http_ok(health, HttpAccess.of(topology))),
                   metrics=("audit", spec.http_port, {}), kind="audit",
                   secured=lambda secrets: secured.audit_settings(topology, secrets))


def etl_program(topology: Topology) -> Program:
    spec = topology.etl
    settings = {"audit.window.ms": str(topology.audit.window_ms), "metrics.host": topology.host,
                "warehouse.retention": f"{spec.retention_hours}h", **spec.settings}
    command = _python("etl", "run", "--zookeeper", topology.cluster_zookeeper(topology.offline),
                      "--warehouse", str(topology.warehouse), "--registry", topology.registry_url,
                      "--every", spec.every, "--master", spec.master, "--metrics-port", str(spec.metrics_port),
                      *_config(topology, "etl"), *_settings("--set", settings))
    # SIGTERM lets the run in progress finish; a load of a few minutes' events takes well under this.
    return Program("etl", command, "loaders", _metrics_health(topology.host, spec.metrics_port), stop_wait_s=180,
                   metrics=("etl", spec.metrics_port, {}), environment={"SPARK_LOCAL_IP": topology.host}, kind="etl",
                   secured=lambda secrets: secured.etl_settings(topology, secrets))


def mirror_program(topology: Topology) -> Program:
    spec = topology.mirror
    # A topic's min.insync.replicas is its cluster's to choose (the offline brokers' default), as MirrorMaker 2
    # does not copy it either.
    # exactly once: the transactional ids are mirror.SOURCE.mirror, the same after every restart by supervisord, so
    # that each start fences its predecessor.
    settings = {"audit.window.ms": str(topology.audit.window_ms), "metrics.host": topology.host,
                "exactly.once": "true" if spec.exactly_once else "false", "process.id": "mirror", **spec.settings}
    command = _python("mirror",
                      *[f"--source={dc.name}={topology.cluster_zookeeper(dc)}" for dc in topology.datacenters],
                      "--target", topology.cluster_zookeeper(topology.offline),
                      "--whitelist", "|".join(EVENT_TOPICS), "--num-streams", str(spec.num_streams),
                      "--metrics-port", str(spec.metrics_port), "--registry", topology.registry_url,
                      "--state-dir", str(topology.mirror_state_dir), *_config(topology, "mirror"),
                      *_settings("--set", settings))
    return Program("mirror", command, "services", _metrics_health(topology.host, spec.metrics_port), stop_wait_s=60,
                   metrics=("mirror", spec.metrics_port, {}), kind="mirror",
                   secured=lambda secrets: secured.mirror_settings(topology, secrets))


def emulator_programs(topology: Topology) -> list[Program]:
    found = []
    for dc in topology.datacenters:
        spec = dc.emulators
        if spec is None:
            continue
        rate = int(spec.rate) if float(spec.rate).is_integer() else spec.rate
        command = _python("producers", "--datacenter", dc.name, "--zookeeper", topology.cluster_zookeeper(dc),
                          "--registry", topology.registry_url, "--servers", str(spec.servers), "--rate", str(rate),
                          "--members", str(spec.members), "--metrics-port", str(spec.metrics_port),
                          "--audit-window-ms", str(topology.audit.window_ms), *_config(topology, f"emulators-{dc.name}"),
                          *_settings("--set", {"metrics.host": topology.host, **spec.settings}))
        found.append(Program(f"emulators-{dc.name}", command, "sources",
                             _metrics_health(topology.host, spec.metrics_port),
                             metrics=("emulator", spec.metrics_port, {"datacenter": dc.name}), kind="emulators",
                             secured=lambda secrets: secured.emulator_settings(topology, secrets)))
    return found


def programs(topology: Topology) -> list[Program]:
    """Every process of ``topology``, in start order."""
    found = zookeeper_programs(topology)
    for cluster in topology.clusters:
        found += broker_programs(topology, cluster)
    found += registry_program(topology)
    found += prometheus_program(topology)
    found += [audit_program(topology), mirror_program(topology)]
    found += emulator_programs(topology)
    found.append(etl_program(topology))
    return found


def scrape_jobs(topology: Topology) -> list[Job]:
    """Prometheus's jobs for the deployment's processes (one job per kind, labels per target). Secured, the
    registry's and the audit's /metrics are scraped over HTTPS as the prometheus user; the other processes serve
    theirs on plain HTTP on the deployment's host (read-only metrics, no secret in them)."""
    jobs: dict[str, list[Target]] = {}
    for program in programs(topology):
        if program.metrics is not None:
            job, port, labels = program.metrics
            jobs.setdefault(job, []).append(Target(f"{topology.host}:{port}", labels))
    if not topology.security:
        return [Job(name, tuple(targets)) for name, targets in jobs.items()]
    secrets = Secrets.of(topology)
    login = ScrapeLogin(PROMETHEUS, str(secrets.password_file(PROMETHEUS)))
    return [Job(name, tuple(targets), scheme="https", ca_file=str(secrets.ca_file), login=login) if name in HTTPS_JOBS
            else Job(name, tuple(targets)) for name, targets in jobs.items()]


def log_file(topology: Topology, program: Program) -> Path:
    return topology.logs_dir / f"{program.name}.log"
