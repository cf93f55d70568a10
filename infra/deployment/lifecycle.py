"""Bring the deployment up stage by stage under supervisord, take it down, remove its data.

``up``: check the port plan is free, write Prometheus's and supervisord's configuration from the topology, start
supervisord (or reuse the running one), then start each stage's programs and wait for their health checks
(ZooKeeper serving, brokers registered, the registry answering, every service's HTTP endpoint, Prometheus ready)
before the next stage; create the event topics in every datacenter; start the ETL once the first events reached
the offline cluster; print where to look. A program that exits or misses its deadline stops ``up`` with its name
and the tail of its log. ``up`` again while it runs starts only what is not running. Secured (``security: on``),
``up`` first makes the missing secrets and writes every program's settings file, and writes each cluster's SCRAM
users and ACLs to ZooKeeper once it serves, before the brokers start; the deployment's own clients connect as
admin; the end shows the URLs and the admin login.

``down``: stop the programs in reverse stage order (the ETL and the emulators first, ZooKeeper last), each with
SIGTERM and its own deadline, then supervisord; the data stays. ``clean``: ``down``, then remove the var directory.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import time
from pathlib import Path
from typing import Callable, Sequence, TextIO

from kazoo.exceptions import KazooException

from infra.deployment import access, clusters, secrets, secured
from infra.deployment.programs import STAGES, Program, http_ok, log_file, programs, scrape_jobs
from infra.deployment.supervisor import ProcessInfo, Supervisor, SupervisorError, render
from infra.deployment.topology import DEFAULT_TOPOLOGY, REPO_ROOT, ClusterSpec, Topology
from infra.prometheus import config as prometheus_config
from pipeline.client.errors import KafkaClientError
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.service import write_owner_only
from pipeline.zk.client import ZooKeeperTimeout, ZooKeeperUnavailable
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS

__all__ = ["DeploymentError", "clean", "down", "up"]

STAGE_TIMEOUT_S = 90.0
FIRST_EVENTS_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 15
# Supervisor states after which a program will not come up without help.
FAILED_STATES = {"FATAL", "EXITED", "STOPPED", "UNKNOWN"}


class DeploymentError(RuntimeError):
    """Something of the deployment did not come up (or down); the message says what and shows its log's end."""


def shown(path: Path) -> str:
    """``path`` relative to the working directory when below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def log_tail(topology: Topology, program: Program, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log_file(topology, program).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "    (no log yet)"
    return "\n".join("    " + line for line in text)


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def check_ports_free(topology: Topology) -> None:
    """DeploymentError naming the first port of the plan something already listens on."""
    for port, what in topology.ports():
        if _port_in_use(topology.host, port):
            raise DeploymentError(f"port {port} ({what}) is already in use on {topology.host}: stop what listens "
                                  f"there or change the port in {shown(topology.path)}")


def restrict_to_owner(directory: Path) -> None:
    """Take every permission of group and others away from ``directory`` and what it holds (symbolic links
    aside): a var directory written before the deployment's processes created their files owner-only."""
    below = (Path(root) / name for root, dirs, files in os.walk(directory) for name in (*dirs, *files))
    for path in (directory, *below):
        try:
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                path.chmod(stat.S_IMODE(mode) & 0o700)
        except FileNotFoundError:
            continue  # removed meanwhile by a running process (a deleted segment)


def write_prometheus_config(topology: Topology) -> None:
    if topology.prometheus.external:
        return
    spec = topology.prometheus
    prometheus_config.write(topology.var_dir / "prometheus", scrape_jobs(topology),
                            scrape_interval=spec.scrape_interval, evaluation_interval=spec.evaluation_interval,
                            hold=spec.hold)


def _wait_healthy(topology: Topology, supervisor: Supervisor, stage: Sequence[Program], timeout: float,
                  out: TextIO) -> None:
    started = time.monotonic()
    waiting = {program.name: program for program in stage}
    while waiting:
        for name, program in list(waiting.items()):
            info = supervisor.info(name)
            if program.health(info.started):
                del waiting[name]
                print(f"  {name:<22} up ({time.monotonic() - started:.1f}s): {program.health.description}",
                      file=out, flush=True)
                continue
            if info.state in FAILED_STATES or (info.state == "BACKOFF" and time.monotonic() - started > 10):
                raise DeploymentError(f"{name} did not come up ({info.state}: {info.description}); end of "
                                      f"{shown(log_file(topology, program))}:\n{log_tail(topology, program)}")
        if waiting and time.monotonic() - started > timeout:
            name, program = next(iter(waiting.items()))
            raise DeploymentError(f"{name} did not come up within {timeout:.0f}s (waiting for: "
                                  f"{program.health.description}); end of {shown(log_file(topology, program))}:\n"
                                  f"{log_tail(topology, program)}")
        if waiting:
            time.sleep(0.2)


def wanted_topics(topology: Topology, cluster: ClusterSpec) -> dict[str, dict[str, str]]:
    """The topics ``up`` creates in ``cluster``, with their configs: the event topics in a datacenter (the mirror
    creates their copies in the offline cluster, from the brokers' defaults), the AuditCount topic in every
    cluster."""
    topics = {topic: cluster.topic_configs() for topic in EVENT_TOPICS} if cluster in topology.datacenters else {}
    topics[AUDIT_TOPIC] = cluster.topic_configs(audit=True)
    return topics


def _create_topics(topology: Topology, out: TextIO) -> None:
    security = secured.admin_command_config(topology).client
    for cluster in topology.clusters:
        if cluster.external:
            continue
        ensured = clusters.ensure_topics(topology.cluster_zookeeper(cluster), wanted_topics(topology, cluster),
                                         cluster.partitions, cluster.replication_factor, security=security)
        if ensured.created:
            replicas = "1 replica" if cluster.replication_factor == 1 else f"{cluster.replication_factor} replicas"
            print(f"  topics of {cluster.name:<13} {len(ensured.created)} created ({cluster.partitions} partitions, "
                  f"{replicas}, min.insync.replicas {cluster.min_insync_replicas})", file=out, flush=True)
        if ensured.reconfigured:
            print(f"  topics of {cluster.name:<13} configs set as the topology says: "
                  f"{', '.join(ensured.reconfigured)}", file=out, flush=True)
        for line in ensured.mismatched:
            print(f"  topics of {cluster.name:<13} {line}", file=out, flush=True)


def _first_events_offline(topology: Topology) -> int:
    try:
        return sum(clusters.end_offsets(topology.cluster_zookeeper(topology.offline), EVENT_TOPICS,
                                        security=secured.admin_command_config(topology).client).values())
    except (ValueError, KafkaClientError, KafkaProtocolError, ZooKeeperUnavailable, ZooKeeperTimeout):
        return 0  # not there yet: no broker registered or answering, no topic yet


def _wait_first_events(topology: Topology, everything: list[Program], out: TextIO) -> None:
    deadline = time.monotonic() + FIRST_EVENTS_TIMEOUT_S
    while (events := _first_events_offline(topology)) == 0:
        if time.monotonic() > deadline:
            mirror = next(p for p in everything if p.name == "mirror")
            raise DeploymentError(f"no event reached the offline cluster within {FIRST_EVENTS_TIMEOUT_S:.0f}s; "
                                  f"end of {shown(log_file(topology, mirror))}:\n{log_tail(topology, mirror)}")
        time.sleep(0.5)
    print(f"first events in the offline cluster: {events}", file=out, flush=True)


def _write_secrets(topology: Topology, everything: list[Program], out: TextIO) -> secrets.Secrets | None:
    """Secured: the missing secrets made, the client properties and every program's settings file written."""
    if not topology.security:
        return None
    found = secrets.ensure(topology)
    secured.write_client_properties(found)
    secured.write_service_configs(topology, found, everything)
    print(f"security on: certificates, passwords and settings in {shown(found.directory)}/ (owner-only)", file=out,
          flush=True)
    return found


def _write_access(topology: Topology, found: secrets.Secrets, out: TextIO) -> None:
    """Each local cluster's SCRAM users and ACLs, in its ZooKeeper chroot (before its brokers start)."""
    for cluster in topology.clusters:
        if cluster.external:
            continue
        try:
            users, resources = access.provision(topology, cluster, found)
        except (ZooKeeperUnavailable, ZooKeeperTimeout, KazooException) as exc:
            raise DeploymentError(f"cannot write the users and ACLs of {cluster.name} to ZooKeeper: {exc}") from None
        if users or resources:
            print(f"  access of {cluster.name:<13} {users} SCRAM user(s) and the ACLs of {resources} resource(s) "
                  "written", file=out, flush=True)


def up(topology: Topology, out: TextIO, *, wait_for_events: bool = True) -> None:
    """Start everything not running yet, stage by stage; DeploymentError when something does not come up."""
    began = time.monotonic()
    everything = programs(topology)
    supervisor = Supervisor(topology)
    reused = supervisor.running()
    if not reused:
        check_ports_free(topology)
    write_owner_only()
    topology.var_dir.mkdir(parents=True, exist_ok=True)
    restrict_to_owner(topology.var_dir)
    found = _write_secrets(topology, everything, out)
    write_prometheus_config(topology)
    changed = supervisor.write_config(render(topology, everything))
    if reused:
        if changed:
            added, updated, removed = supervisor.reload()
            print(f"supervisord (pid {supervisor.pid()}) reloaded {shown(supervisor.config_path)}: "
                  f"{len(added)} added, {len(updated)} changed, {len(removed)} removed", file=out, flush=True)
        else:
            print(f"supervisord already running (pid {supervisor.pid()}); starting what is not running",
                  file=out, flush=True)
    else:
        supervisor.start_daemon()
        print(f"supervisord started (pid {supervisor.pid()}, {shown(supervisor.config_path)}, logs in "
              f"{shown(topology.logs_dir)}/)", file=out, flush=True)
    states = {info.name: info for info in supervisor.infos()}
    for stage in STAGES:
        if stage == "loaders" and wait_for_events:
            _wait_first_events(topology, everything, out)
        if stage == "brokers" and found is not None:
            _write_access(topology, found, out)
        members = [program for program in everything if program.stage == stage]
        if not members:
            continue
        print(f"{stage}:", file=out, flush=True)
        for program in members:
            if not states.get(program.name, _stopped(program.name)).running:
                supervisor.start(program.name)
        _wait_healthy(topology, supervisor, members, STAGE_TIMEOUT_S, out)
        if stage == "registry":
            _create_topics(topology, out)
    print(f"pipeline up in {time.monotonic() - began:.1f}s", file=out, flush=True)
    print(summary(topology), file=out, flush=True)


def _stopped(name: str) -> ProcessInfo:
    return ProcessInfo(name, "STOPPED", 0, 0.0, 0, "")


def prometheus_alerts_url(base_url: str) -> str:
    """The alerts page of the Prometheus at ``base_url``: ``/alerts`` of its web UI, or ``/classic/alerts`` where
    the build has only the classic UI (Debian's package, whose ``/alerts`` answers 404)."""
    for path in ("/alerts", "/classic/alerts"):
        if http_ok(base_url + path):
            return base_url + path
    return base_url + "/alerts"


def summary(topology: Topology) -> str:
    """Where to look and what to try once the pipeline is up."""
    python = "python" if Path.cwd() != REPO_ROOT else ".venv/bin/python"
    default = topology.path == DEFAULT_TOPOLOGY
    topology_option = "" if default else f" --topology {topology.path}"
    make_option = "" if default else f" TOPOLOGY={topology.path}"
    offline = topology.cluster_zookeeper(topology.offline)
    datacenters = " ".join(f"--datacenter {dc.name}={topology.cluster_zookeeper(dc)}" for dc in topology.datacenters)
    login, connect, security = "", "", []
    if topology.security:
        found = secrets.Secrets.of(topology)
        login = f"  (login {secrets.ADMIN} / {found.password(secrets.ADMIN)})"
        admin_properties = shown(found.client_properties(secrets.ADMIN))
        connect = f" --command-config {admin_properties}"
        security = [f"  security    SASL_SSL (SCRAM-SHA-512) brokers, HTTPS; CA {shown(found.ca_file)}; clients as "
                    f"admin: --command-config {admin_properties}"]
    return "\n".join([
        "",
        f"  dashboard   {topology.dashboard_url}{login}",
        f"  prometheus  {topology.prometheus_url}  (alerts: {prometheus_alerts_url(topology.prometheus_url)})",
        f"  registry    {topology.registry_url}/subjects{login}",
        f"  logs        {shown(topology.logs_dir)}/   data {shown(topology.var_dir)}/",
        *security,
        "",
        "Try:",
        f"  {python} -m pipeline status{topology_option}",
        f"  {python} -m pipeline topics list --zookeeper {offline}{connect}",
        f"  {python} -m audit report --state-dir {shown(topology.audit_state_dir)}",
        f"  {python} -m audit trace EVENT_ID {datacenters} --offline {offline} --warehouse "
        f"{shown(topology.warehouse)} --state-dir {shown(topology.audit_state_dir)}{connect}",
        f"  {python} -m etl query --warehouse {shown(topology.warehouse)} "
        "\"SELECT kafka_topic, count(*) FROM events GROUP BY kafka_topic\"",
        f"  {python} -m pipeline chaos kill-broker dc1{topology_option}",
        "",
        f"Stop it with `make pipeline-down{make_option}` (the data stays; `make pipeline-clean{make_option}` removes "
        "it).",
    ])


def down(topology: Topology, out: TextIO) -> bool:
    """Stop every program in reverse stage order, then supervisord; whether anything was running."""
    supervisor = Supervisor(topology)
    if supervisor.pid() is None:
        print(f"nothing running (no supervisord for {shown(topology.var_dir)})", file=out, flush=True)
        return False
    try:
        running = {info.name for info in supervisor.infos() if info.state not in {"STOPPED", "EXITED", "FATAL"}}
    except (OSError, SupervisorError):
        running = set()
    for stage in reversed(STAGES):
        for program in (p for p in programs(topology) if p.stage == stage and p.name in running):
            began = time.monotonic()
            supervisor.stop(program.name)
            print(f"stopped {program.name} ({time.monotonic() - began:.1f}s)", file=out, flush=True)
    supervisor.shutdown()
    print("stopped supervisord; the data stays in " + shown(topology.var_dir), file=out, flush=True)
    return True


def clean(topology: Topology, out: TextIO, remove: Callable[[Path], None] = shutil.rmtree) -> None:
    """``down``, then remove the var directory (refused for the repository itself or a directory above it)."""
    down(topology, out)
    var = topology.var_dir.resolve()
    if var == Path(var.anchor) or var in REPO_ROOT.parents or var == REPO_ROOT:
        raise DeploymentError(f"refusing to remove {var}: var_dir must be a directory of its own")
    if var.exists():
        remove(var)
        print(f"removed {shown(var)}", file=out, flush=True)
