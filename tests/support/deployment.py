"""The whole deployment (`python -m infra.deployment`) in tests: a reduced topology on free ports in a short
temporary var directory, started and stopped as `make pipeline-up` and `make pipeline-down` do, with a check that
nothing it started is left running. Secured (the default), the tests read its clusters and its audit as admin, and
:func:`unrefused` tries the brokers, the registry and the dashboard without the right credentials."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import urllib.error
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import pyarrow.dataset as ds
import yaml
from kazoo.exceptions import NoAuthError

from infra.deployment import clusters
from infra.deployment.programs import HttpAccess, http_get
from infra.deployment.secrets import ADMIN, Secrets
from infra.deployment.secured import admin_command_config
from infra.deployment.supervisor import Supervisor
from infra.deployment.topology import Topology, load
from pipeline.client.admin import AdminClient
from pipeline.client.errors import KafkaClientError
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity
from pipeline.zk.client import connect
from pipeline.warehouse_state import live_files
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS
from schemas.serde import event_key
from tests.support.broker import REPO_ROOT
from tests.support.ports import consecutive_free_ports

UP_TIMEOUT_S = 300


def reduced_topology(var_dir: Path, first_port: int, *, datacenters: tuple[str, ...] = ("dc1", "dc2"),
                     brokers: dict[str, int] | None = None, rate: int = 40, window_ms: int = 2000,
                     grace_ms: int = 4000, etl_every: str = "15s") -> dict[str, Any]:
    """A small topology: low emulator rates, short audit windows and ETL interval, brokers per cluster as given
    (2 in dc1, 1 elsewhere by default), every topic on every broker of its cluster with one fewer in-sync replica
    required (at least one), brokers' ZooKeeper sessions of 6 s (a killed broker's registration goes soon), ports
    from ``first_port`` on (fewer than 60)."""
    brokers = {"dc1": 2, **(brokers or {})}
    ports = iter(range(first_port, first_port + 1000))

    def block(size: int) -> int:
        first = next(ports)
        for _ in range(size - 1):
            next(ports)
        return first

    def cluster(name: str) -> dict[str, Any]:
        count = brokers.get(name, 1)
        return {"brokers": count, "port": block(count), "metrics_port": block(count), "partitions": 2,
                "replication_factor": count, "min_insync_replicas": max(1, count - 1),
                "settings": {"zookeeper.session.timeout.ms": 6000}}

    document: dict[str, Any] = {
        "var_dir": str(var_dir), "host": "127.0.0.1",
        "zookeeper": {"nodes": 1, "port": next(ports), "tick_ms": 500},
        "datacenters": {}, "offline": cluster("offline"),
        "registry": {"port": next(ports)},
        "mirror": {"metrics_port": next(ports), "settings": {"offset.commit.interval.ms": 1000}},
        "etl": {"every": etl_every, "master": "local[1]", "metrics_port": next(ports)},
        "audit": {"http_port": next(ports), "window_ms": window_ms, "grace_ms": grace_ms,
                  "settings": {"reconcile.interval.ms": 500, "checkpoint.interval.ms": 500}},
        "prometheus": {"port": next(ports), "scrape_interval": "2s", "evaluation_interval": "2s", "hold": "4s"},
    }
    for name in datacenters:
        document["datacenters"][name] = {**cluster(name), "emulators": {
            "servers": 2, "rate": rate, "members": 500, "metrics_port": next(ports),
            "settings": {"created.log": str(var_dir / "created" / f"{name}.log")}}}
    return document


class Deployment:
    """A reduced deployment in a temporary directory; ``up``, ``down``, and what it left running."""

    def __init__(self, **options: Any) -> None:
        # A short path: supervisord's unix socket lives under it (at most 107 bytes).
        self.var_dir = Path(tempfile.mkdtemp(prefix="pl-"))
        self.path = self.var_dir / "topology.yml"
        self.document = reduced_topology(self.var_dir, consecutive_free_ports(60), **options)
        self.path.write_text(yaml.safe_dump(self.document, sort_keys=False))
        self.topology: Topology = load(self.path)
        self.supervisor = Supervisor(self.topology)

    def rewrite(self, document: dict[str, Any]) -> None:
        """Write ``document`` as the topology file (and read it back)."""
        self.document = document
        self.path.write_text(yaml.safe_dump(document, sort_keys=False))
        self.topology = load(self.path)
        self.supervisor = Supervisor(self.topology)

    def command(self, *arguments: str, timeout: float = UP_TIMEOUT_S, module: str = "infra.deployment",
                check: bool = True) -> subprocess.CompletedProcess:
        """``python -m <module> <arguments> --topology <ours>``, its output captured."""
        result = subprocess.run([sys.executable, "-m", module, *arguments, "--topology", str(self.path)],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if check:
            assert result.returncode == 0, f"{arguments}: exit {result.returncode}\n{result.stdout[-3000:]}\n" \
                                           f"{result.stderr[-3000:]}"
        return result

    def up(self) -> subprocess.CompletedProcess:
        return self.command("up")

    def pids(self) -> set[int]:
        """supervisord and every process it runs now."""
        found = {info.pid for info in self.supervisor.infos() if info.pid}
        pid = self.supervisor.pid()
        return found | ({pid} if pid else set())

    def leftovers(self) -> list[str]:
        """Command lines of live processes that mention this deployment's var directory."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if str(self.var_dir) in command and state != "Z":
                found.append(f"{proc.name}: {command[:200]}")
        return found

    def log(self, program: str, tail: int = 4000) -> str:
        path = self.topology.logs_dir / f"{program}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else "(no log)"

    def close(self) -> None:
        """Stop whatever still runs (SIGKILL what ``down`` could not) and remove the directory."""
        if self.supervisor.pid() is not None:
            subprocess.run([sys.executable, "-m", "infra.deployment", "down", "--topology", str(self.path)],
                           cwd=REPO_ROOT, capture_output=True, timeout=600)
        for line in self.leftovers():
            try:
                os.kill(int(line.split(":", 1)[0]), 9)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.var_dir, ignore_errors=True)


def created_events(topology: Topology) -> dict[str, tuple[str, str, int]]:
    """eventId -> (datacenter, topic, event time) of every event the emulators created, from their created logs
    (``created.log``, which the reduced topology sets); an id listed twice fails."""
    created: dict[str, tuple[str, str, int]] = {}
    for datacenter in topology.datacenters:
        assert datacenter.emulators is not None
        with open(datacenter.emulators.settings["created.log"]) as lines:
            for line in lines:
                event_id, topic, event_time = line.split()
                assert event_id not in created, f"{event_id} created twice"
                created[event_id] = (datacenter.name, topic, int(event_time))
    return created


def admin_security(topology: Topology) -> ClientSecurity:
    """How the tests connect to the deployment's brokers: as admin when it is secured."""
    return admin_command_config(topology).client


def unrefused(topology: Topology) -> list[str]:
    """What let in a client without the right credentials (empty when everything refused it): each broker of each
    cluster to a plaintext client and to a SASL_SSL one with a wrong password, the registry and the dashboard to a
    request without a login and with a wrong password, each cluster's ZooKeeper state to a client without the
    deployment's digest."""
    admin = admin_security(topology)
    wrong = replace(admin, password=admin.password + "-wrong")
    let_in = []
    for cluster in topology.clusters:
        for broker_id in cluster.broker_ids():
            address = f"{topology.host}:{cluster.broker_port(broker_id)}"
            for what, security in (("plaintext", PLAINTEXT_SECURITY), ("a wrong password", wrong)):
                try:
                    with AdminClient(address, timeout_s=5.0, security=security) as client:
                        client.list_topics()
                except (KafkaClientError, KafkaProtocolError, OSError):
                    continue
                let_in.append(f"broker {broker_id} of {cluster.name} ({address}) served a client with {what}")
    secrets = Secrets.of(topology)
    for name, url in (("registry", f"{topology.registry_url}/subjects"), ("dashboard", f"{topology.dashboard_url}api/windows")):
        for what, access in (("no login", HttpAccess(str(secrets.ca_file), "", "")),
                             ("a wrong password", HttpAccess(str(secrets.ca_file), ADMIN, "wrong"))):
            try:
                http_get(url, access, 5.0)
                let_in.append(f"the {name} at {url} served a request with {what}")
            except urllib.error.HTTPError as error:
                if error.code != 401:
                    let_in.append(f"the {name} at {url} answered a request with {what} HTTP {error.code}, not 401")
    for cluster in topology.clusters:
        client = connect(topology.cluster_zookeeper(cluster))
        try:
            client.set(f"/brokers/topics/{AUDIT_TOPIC}", b'{"partitions": {}}')
            let_in.append(f"a ZooKeeper client without the digest rewrote a topic's assignment in {cluster.name}")
        except NoAuthError:
            pass
        finally:
            client.stop()
            client.close()
    return let_in


def source_events(topology: Topology) -> dict[tuple[str, str, int, int], str | None]:
    """(datacenter, topic, partition, offset) -> eventId of every record stored in the datacenters' clusters (None
    for a record that is no event: a poison record)."""
    events: dict[tuple[str, str, int, int], str | None] = {}
    for datacenter in topology.datacenters:
        with clusters.admin(topology.cluster_zookeeper(datacenter), security=admin_security(topology)) as admin:
            addresses = admin.cluster.brokers()
            for topic in EVENT_TOPICS:
                for partition in admin.cluster.partitions_for(topic):
                    host, port = addresses[admin.cluster.leader(topic, partition)]
                    with SimpleConsumer(host, port, security=admin.cluster.security) as consumer:
                        offset = consumer.get_offsets_before(topic, partition, -2, 1)[0]
                        while batch := [m for m in consumer.fetch(FetchRequest(topic, partition, offset, 4 << 20))
                                        if m.offset >= offset]:
                            for message in batch:
                                key = event_key(bytes(message.value or b""))
                                events[(datacenter.name, topic, partition, message.offset)] = \
                                    None if key is None else key.event_id
                            offset = batch[-1].offset + 1
    return events


def warehouse_events(topology: Topology) -> list[tuple[tuple[str, str, int, int], str]]:
    """((source cluster, topic, source partition, source offset), eventId) of every warehouse row, duplicates kept:
    the rows of the live files the warehouse's snapshot lists (a compaction's replaced files stay on disk a while)."""
    rows = []
    live = live_files(topology.warehouse)
    for topic in EVENT_TOPICS:
        if not live.get(topic):
            continue
        data = ds.dataset([str(path) for path in live[topic]], format="parquet").to_table(
            columns=["source_cluster", "source_partition", "source_offset", "header"])
        for row in data.to_pylist():
            rows.append(((row["source_cluster"], topic, row["source_partition"], row["source_offset"]),
                         row["header"]["eventId"]))
    return rows


class Listener(NamedTuple):
    """A socket a process listens on (TCP) or receives on (UDP)."""

    protocol: str
    address: str
    port: int
    pid: int
    command: str


# /proc/net/tcp's state of a listening socket; every UDP socket bound to a port receives
_LISTEN = "0A"


def process_tree(roots: Iterable[int], proc: Path = Path("/proc")) -> set[int]:
    """``roots`` and every live descendant of theirs."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # four 32-bit words, each in host (little-endian) order
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def listeners(pids: Iterable[int], proc: Path = Path("/proc")) -> list[Listener]:
    """Every TCP socket listening and UDP socket bound, of the processes ``pids``."""
    owners: dict[int, int] = {}
    for pid in pids:
        try:
            for fd in (proc / str(pid) / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    owners[int(target[8:-1])] = pid
        except OSError:
            continue
    found = []
    for protocol in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = (proc / "net" / protocol).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if inode not in owners or (protocol.startswith("tcp") and state != _LISTEN):
                continue
            hex_address, hex_port = local.split(":")
            pid = owners[inode]
            try:
                command = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                command = "?"
            found.append(Listener(protocol, _address(hex_address), int(hex_port, 16), pid, command[:160]))
    return found


def loose_permissions(directory: Path) -> list[str]:
    """Every file and directory under ``directory`` (itself included) that its group or others may use."""
    found = []
    for root, dirs, files in os.walk(directory):
        for path in (Path(root), *(Path(root) / name for name in files)):
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue  # deleted meanwhile (a segment, a temporary file)
            if not stat.S_ISLNK(mode) and mode & 0o077:
                found.append(f"{oct(stat.S_IMODE(mode))} {path}")
    return found
