"""The deployment's topology file (infra/topology.yml): what runs, how big, on which loopback ports, where.

:func:`load` reads the YAML file into a :class:`Topology` and checks it whole (unknown keys, types, ranges, two
processes on one port), raising :class:`TopologyError` with the key path at fault. Every other part of the
deployment (the supervisor configuration, the start order, status, chaos, Prometheus's targets) works from the
:class:`Topology`, never from the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from pipeline.zk.server import MIN_SNAPSHOTS_KEPT

__all__ = ["AuditSpec", "ClusterSpec", "DEFAULT_TOPOLOGY", "EmulatorSpec", "EtlSpec", "LogsSpec", "MirrorSpec",
           "PrometheusSpec", "REPO_ROOT", "RegistrySpec", "Topology", "TopologyError", "ZooKeeperSpec", "load"]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOPOLOGY = REPO_ROOT / "infra" / "topology.yml"
OFFLINE = "offline"
# The smallest log segment the topology accepts (Kafka's own minimum, 14 bytes, rolls at every batch).
SMALLEST_SEGMENT = 1 << 20
# Kafka's log.roll.hours: a segment younger than this is rolled only when full.
ROLL_HOURS = 168
_NAME = re.compile(r"[a-z][a-z0-9]*")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Sizes as supervisord and Prometheus read them: KB, MB, GB are powers of 1024.
_SIZE = re.compile(r"([0-9]+) *(B|KB|MB|GB|TB)?", re.IGNORECASE)
_BYTES = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}


class TopologyError(ValueError):
    """The topology file is missing, not YAML, or says something the deployment cannot run."""


@dataclass(frozen=True)
class ZooKeeperSpec:
    """The ZooKeeper every cluster, the registry and the ETL's lock use: ``nodes`` local servers, or ``connect``."""

    nodes: int = 1
    port: int = 2181
    peer_port: int = 2888
    election_port: int = 3888
    tick_ms: int = 2000
    connect: str | None = None
    snapshots_kept: int = 3
    purge_interval_hours: int = 1

    @property
    def external(self) -> bool:
        return self.connect is not None

    def client_ports(self) -> list[int]:
        return [] if self.external else [self.port + i for i in range(self.nodes)]

    def peers(self) -> list[tuple[int, int, int]]:
        """(server id, peer port, election port) of every node of a local ensemble ([] when standalone)."""
        if self.external or self.nodes == 1:
            return []
        return [(i + 1, self.peer_port + i, self.election_port + i) for i in range(self.nodes)]


@dataclass(frozen=True)
class EmulatorSpec:
    """The frontend emulators of one datacenter: servers, events per second all together, metrics port."""

    servers: int = 4
    rate: float = 200.0
    metrics_port: int = 9301
    members: int = 1_000_000
    settings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterSpec:
    """One broker cluster (a datacenter's or the offline one): its brokers' ports, or an external ZooKeeper path;
    the replication and retention of the topics the deployment creates in it, and its brokers' defaults."""

    name: str
    brokers: int = 3
    port: int = 9092
    metrics_port: int = 9201
    partitions: int = 4
    chroot: str = ""
    zookeeper: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    emulators: EmulatorSpec | None = None
    replication_factor: int = 3
    min_insync_replicas: int = 2
    log_retention_hours: int = 12
    # per partition, as Kafka's log.retention.bytes (-1: no limit)
    log_retention_bytes: int = 128 << 20
    log_segment_bytes: int = 32 << 20
    audit_retention_hours: int = 24

    @property
    def external(self) -> bool:
        return self.zookeeper is not None

    def broker_defaults(self) -> dict[str, str]:
        """The brokers' own defaults for what the topology says of the cluster's topics (a topic created by a
        client, such as the mirror's target topics, gets them too); a segment rolls at least as often as the
        retention, so that the time limit can delete it."""
        return {"default.replication.factor": str(self.replication_factor),
                "min.insync.replicas": str(self.min_insync_replicas),
                "log.retention.hours": str(self.log_retention_hours),
                "log.retention.bytes": str(self.log_retention_bytes),
                "log.segment.bytes": str(self.log_segment_bytes),
                "log.roll.hours": str(min(self.log_retention_hours, ROLL_HOURS))}

    def topic_configs(self, *, audit: bool = False) -> dict[str, str]:
        """The configs of a topic the deployment creates in the cluster (``audit``: the AuditCount topic)."""
        configs = {"min.insync.replicas": str(self.min_insync_replicas)}
        if audit:
            # bounded by its age alone, as audit_retention_hours says (not by the brokers' log.retention.bytes)
            configs.update({"retention.ms": str(self.audit_retention_hours * 3_600_000), "retention.bytes": "-1"})
        return configs

    def broker_ids(self) -> list[int]:
        return [] if self.external else list(range(1, self.brokers + 1))

    def broker_port(self, broker_id: int) -> int:
        return self.port + broker_id - 1

    def broker_metrics_port(self, broker_id: int) -> int:
        return self.metrics_port + broker_id - 1


@dataclass(frozen=True)
class RegistrySpec:
    """The schema registry (state in ZooKeeper under ``chroot``), or an external one at ``url``."""

    port: int = 8081
    chroot: str = "/schema-registry"
    url: str | None = None

    @property
    def external(self) -> bool:
        return self.url is not None


@dataclass(frozen=True)
class MirrorSpec:
    """The mirror of every datacenter into the offline cluster."""

    metrics_port: int = 9311
    num_streams: int = 1
    settings: Mapping[str, str] = field(default_factory=dict)
    #: Copy inside transactions, the source offsets kept in the offline cluster (the mirror's exactly.once).
    exactly_once: bool = True


@dataclass(frozen=True)
class EtlSpec:
    """The scheduled PySpark load of the offline cluster into the Parquet warehouse."""

    every: str = "5m"
    master: str = "local[2]"
    warehouse: Path = Path("warehouse")
    metrics_port: int = 9321
    settings: Mapping[str, str] = field(default_factory=dict)
    #: Hour partitions of the warehouse (its quarantine included) are deleted this long after their hour.
    retention_hours: int = 168

    @property
    def every_seconds(self) -> float:
        return _seconds(self.every)


@dataclass(frozen=True)
class AuditSpec:
    """The audit service: its HTTP port (dashboard, API, metrics), window and grace."""

    http_port: int = 8090
    window_ms: int = 60_000
    grace_ms: int = 30_000
    settings: Mapping[str, str] = field(default_factory=dict)
    #: Windows (their counts, sketches and results) are kept this long.
    retain_hours: int = 6


@dataclass(frozen=True)
class PrometheusSpec:
    """The Prometheus server scraping every process, with the pipeline's rules, or an external one at ``url``; its
    TSDB keeps ``retention_time`` and at most ``retention_size`` bytes, whichever is reached first."""

    port: int = 9090
    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"
    hold: str | None = None
    url: str | None = None
    retention_time: str = "7d"
    retention_size: int = 1 << 30

    @property
    def external(self) -> bool:
        return self.url is not None


@dataclass(frozen=True)
class LogsSpec:
    """supervisord's rotation of every process's log and its own: a file is rotated at ``max_bytes`` and
    ``backups`` rotated files are kept."""

    max_bytes: int = 50 << 20
    backups: int = 2


@dataclass(frozen=True)
class Topology:
    """The whole deployment, as read from a topology file."""

    path: Path
    var_dir: Path
    host: str
    zookeeper: ZooKeeperSpec
    datacenters: tuple[ClusterSpec, ...]
    offline: ClusterSpec
    registry: RegistrySpec
    mirror: MirrorSpec
    etl: EtlSpec
    audit: AuditSpec
    prometheus: PrometheusSpec
    logs: LogsSpec = LogsSpec()
    #: on (the default): TLS, SASL/SCRAM and ACLs on the brokers, authenticated HTTPS registry and dashboard,
    #: ZooKeeper ACLs, secrets under var/secrets; off: the plaintext deployment of before.
    security: bool = True

    @property
    def clusters(self) -> tuple[ClusterSpec, ...]:
        return (*self.datacenters, self.offline)

    def cluster(self, name: str) -> ClusterSpec:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(f"no cluster {name!r} (the topology has {', '.join(c.name for c in self.clusters)})")

    @property
    def zookeeper_connect(self) -> str:
        """ZooKeeper's connect string, without a chroot."""
        if self.zookeeper.connect is not None:
            return self.zookeeper.connect
        return ",".join(f"{self.host}:{port}" for port in self.zookeeper.client_ports())

    def cluster_zookeeper(self, cluster: ClusterSpec) -> str:
        """The cluster's ``zookeeper.connect`` (its chroot included)."""
        return cluster.zookeeper if cluster.zookeeper is not None else self.zookeeper_connect + cluster.chroot

    def bootstrap(self, cluster: ClusterSpec) -> str | None:
        """host:port of the cluster's brokers when they run here (None for an external cluster)."""
        if cluster.external:
            return None
        return ",".join(f"{self.host}:{cluster.broker_port(b)}" for b in cluster.broker_ids())

    @property
    def registry_url(self) -> str:
        return self.registry.url or f"{self.http_scheme}://{self.host}:{self.registry.port}"

    @property
    def registry_zookeeper(self) -> str:
        return self.zookeeper_connect + self.registry.chroot

    @property
    def prometheus_url(self) -> str:
        return self.prometheus.url or f"http://{self.host}:{self.prometheus.port}"

    @property
    def dashboard_url(self) -> str:
        return f"{self.http_scheme}://{self.host}:{self.audit.http_port}/"

    @property
    def http_scheme(self) -> str:
        """How the deployment's own HTTP services (registry, dashboard) are reached: https when secured."""
        return "https" if self.security else "http"

    @property
    def secrets_dir(self) -> Path:
        return self.var_dir / "secrets"

    @property
    def warehouse(self) -> Path:
        return self.etl.warehouse if self.etl.warehouse.is_absolute() else self.var_dir / self.etl.warehouse

    @property
    def audit_state_dir(self) -> Path:
        return self.var_dir / "audit"

    @property
    def mirror_state_dir(self) -> Path:
        return self.var_dir / "mirror"

    @property
    def logs_dir(self) -> Path:
        return self.var_dir / "logs"

    @property
    def supervisor_dir(self) -> Path:
        return self.var_dir / "supervisor"

    def ports(self) -> list[tuple[int, str]]:
        """Every port a process of this deployment listens on here, with what listens there."""
        ports: list[tuple[int, str]] = []
        for index, port in enumerate(self.zookeeper.client_ports()):
            ports.append((port, f"zookeeper node {index + 1}"))
        for server_id, peer, election in self.zookeeper.peers():
            ports += [(peer, f"zookeeper node {server_id} (peers)"), (election, f"zookeeper node {server_id} (election)")]
        for cluster in self.clusters:
            for broker_id in cluster.broker_ids():
                ports.append((cluster.broker_port(broker_id), f"broker {broker_id} of {cluster.name}"))
                ports.append((cluster.broker_metrics_port(broker_id), f"broker {broker_id} of {cluster.name} (metrics)"))
            if cluster.emulators is not None:
                ports.append((cluster.emulators.metrics_port, f"emulators of {cluster.name} (metrics)"))
        if not self.registry.external:
            ports.append((self.registry.port, "schema registry"))
        ports += [(self.mirror.metrics_port, "mirror (metrics)"), (self.etl.metrics_port, "etl (metrics)"),
                  (self.audit.http_port, "audit")]
        if not self.prometheus.external:
            ports.append((self.prometheus.port, "prometheus"))
        return ports


def load(path: str | Path = DEFAULT_TOPOLOGY) -> Topology:
    """The topology in the YAML file ``path``; TopologyError naming the file and key when it is wrong."""
    path = Path(path).resolve()
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise TopologyError(f"{path}: not YAML: {' '.join(str(exc).split())}") from None
    try:
        return _topology(path, _Node(document if document is not None else {}, ""))
    except TopologyError as exc:
        raise TopologyError(f"{path}: {exc}") from None


class _Node:
    """A mapping of the document with its key path, reading typed values and rejecting unknown keys."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise TopologyError(f"{where or 'the file'}: must be a mapping")
        self.value = value
        self.where = where
        self.read: set[str] = set()

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: Callable[[Any, str], Any], default: Any) -> Any:
        self.read.add(key)
        if key not in self.value or self.value[key] is None:
            return default
        return kind(self.value[key], self._path(key))

    def child(self, key: str) -> "_Node":
        self.read.add(key)
        return _Node(self.value.get(key) or {}, self._path(key))

    def has(self, key: str) -> bool:
        return self.value.get(key) is not None

    def done(self) -> None:
        unknown = sorted(set(map(str, self.value)) - self.read)
        if unknown:
            raise TopologyError(f"{self._path(unknown[0])}: unknown key (known: {', '.join(sorted(self.read))})")


def _integer(low: int, high: int = 2**31 - 1) -> Callable[[Any, str], int]:
    def read(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise TopologyError(f"{where}: must be an integer from {low} to {high}, not {value!r}")
        return value
    return read


def _port(value: Any, where: str) -> int:
    return _integer(1, 65535)(value, where)


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TopologyError(f"{where}: must be a positive number, not {value!r}")
    return float(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or str(value) == "":
        raise TopologyError(f"{where}: must be a non-empty string, not {value!r}")
    return str(value)


def _switch(value: Any, where: str) -> bool:
    """on or off (YAML reads both as booleans; true and false are fine too)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("on", "off"):
        return value.strip().lower() == "on"
    raise TopologyError(f"{where}: must be on or off, not {value!r}")


def _duration(value: Any, where: str) -> str:
    text = _text(value, where)
    if not _DURATION.fullmatch(text):
        raise TopologyError(f"{where}: {text!r} is not a duration such as 500ms, 30s, 5m, 1h")
    return text


def _prometheus_duration(value: Any, where: str) -> str:
    text = _duration(value, where)
    if "." in text:
        raise TopologyError(f"{where}: Prometheus durations are whole numbers ({text!r})")
    return text


def _chroot(value: Any, where: str) -> str:
    text = _text(value, where)
    if not text.startswith("/") or text.endswith("/") or "//" in text:
        raise TopologyError(f"{where}: a chroot is /NAME[/NAME...], not {text!r}")
    return text


def _url(value: Any, where: str) -> str:
    text = _text(value, where).rstrip("/")
    if not re.fullmatch(r"https?://[^/\s]+", text):
        raise TopologyError(f"{where}: must be http://HOST:PORT, not {text!r}")
    return text


def _settings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TopologyError(f"{where}: must be a mapping of setting names to values")
    return {str(key): _setting_value(item) for key, item in value.items()}


def _setting_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _size(value: Any, where: str) -> int:
    """Bytes: an integer, or a number with B, KB, MB, GB or TB (powers of 1024, as supervisord and Prometheus
    read them)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.fullmatch(str(value).strip()) if isinstance(value, str) else None
    if match is None:
        raise TopologyError(f"{where}: {value!r} is not a size such as 512MB, 1GB or a number of bytes")
    return int(match.group(1)) * _BYTES[(match.group(2) or "B").lower()]


def _segment_bytes(value: Any, where: str) -> int:
    size = _size(value, where)
    if not SMALLEST_SEGMENT <= size <= 2**31 - 1:
        raise TopologyError(f"{where}: a log segment is from 1MB to 2GB less a byte, not {value!r}")
    return size


def _retention_bytes(value: Any, where: str) -> int:
    """A size, or -1 for no limit (Kafka's log.retention.bytes)."""
    return -1 if value == -1 else _size(value, where)


def _seconds(text: str) -> float:
    match = _DURATION.fullmatch(text)
    assert match is not None
    return float(match.group(1)) * _SECONDS[match.group(2)]


def _topology(path: Path, root: _Node) -> Topology:
    var_dir = Path(root.get("var_dir", _text, "var"))
    var_dir = var_dir if var_dir.is_absolute() else REPO_ROOT / var_dir
    host = root.get("host", _text, "127.0.0.1")
    zookeeper = _zookeeper(root.child("zookeeper"))
    datacenters_node = root.child("datacenters")
    if not datacenters_node.value:
        raise TopologyError("datacenters: at least one datacenter is needed")
    datacenters = []
    for name in datacenters_node.value:
        datacenters_node.read.add(name)
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name == OFFLINE:
            raise TopologyError(f"datacenters.{name}: a datacenter's name is lower-case letters and digits "
                                f"(and not {OFFLINE!r})")
        datacenters.append(_cluster(name, _Node(datacenters_node.value[name] or {}, f"datacenters.{name}"),
                                    zookeeper, datacenter=True))
    offline = _cluster(OFFLINE, root.child(OFFLINE), zookeeper, datacenter=False)
    registry_node = root.child("registry")
    registry = RegistrySpec(registry_node.get("port", _port, 8081),
                            registry_node.get("chroot", _chroot, "/schema-registry"),
                            registry_node.get("url", _url, None))
    registry_node.done()
    mirror_node = root.child("mirror")
    mirror = MirrorSpec(mirror_node.get("metrics_port", _port, 9311), mirror_node.get("num_streams", _integer(1, 64), 1),
                        mirror_node.get("settings", _settings, {}), mirror_node.get("exactly_once", _switch, True))
    mirror_node.done()
    etl_node = root.child("etl")
    etl = EtlSpec(etl_node.get("every", _duration, "5m"), etl_node.get("master", _text, "local[2]"),
                  Path(etl_node.get("warehouse", _text, "warehouse")), etl_node.get("metrics_port", _port, 9321),
                  etl_node.get("settings", _settings, {}),
                  etl_node.get("retention_hours", _integer(1), EtlSpec.retention_hours))
    etl_node.done()
    audit_node = root.child("audit")
    audit = AuditSpec(audit_node.get("http_port", _port, 8090), audit_node.get("window_ms", _integer(100), 60_000),
                      audit_node.get("grace_ms", _integer(0), 30_000), audit_node.get("settings", _settings, {}),
                      audit_node.get("retain_hours", _integer(1), AuditSpec.retain_hours))
    audit_node.done()
    prometheus_node = root.child("prometheus")
    prometheus = PrometheusSpec(prometheus_node.get("port", _port, 9090),
                                prometheus_node.get("scrape_interval", _prometheus_duration, "15s"),
                                prometheus_node.get("evaluation_interval", _prometheus_duration, "15s"),
                                prometheus_node.get("hold", _prometheus_duration, None),
                                prometheus_node.get("url", _url, None),
                                prometheus_node.get("retention_time", _prometheus_duration,
                                                    PrometheusSpec.retention_time),
                                prometheus_node.get("retention_size", _size, PrometheusSpec.retention_size))
    prometheus_node.done()
    logs_node = root.child("logs")
    logs = LogsSpec(logs_node.get("max_bytes", _size, LogsSpec.max_bytes),
                    logs_node.get("backups", _integer(0, 1000), LogsSpec.backups))
    logs_node.done()
    security = root.get("security", _switch, True)
    root.done()
    topology = Topology(path, var_dir, host, zookeeper, tuple(datacenters), offline, registry, mirror, etl, audit,
                        prometheus, logs, security)
    _check_ports(topology)
    return topology


def _zookeeper(node: _Node) -> ZooKeeperSpec:
    spec = ZooKeeperSpec(node.get("nodes", _integer(1, 7), 1), node.get("port", _port, 2181),
                         node.get("peer_port", _port, 2888), node.get("election_port", _port, 3888),
                         node.get("tick_ms", _integer(100, 60_000), 2000), node.get("connect", _text, None),
                         node.get("snapshots_kept", _integer(MIN_SNAPSHOTS_KEPT, 1000), ZooKeeperSpec.snapshots_kept),
                         node.get("purge_interval_hours", _integer(1, 24 * 365), ZooKeeperSpec.purge_interval_hours))
    node.done()
    if spec.nodes % 2 == 0:
        raise TopologyError(f"zookeeper.nodes: {spec.nodes} nodes tolerate no more failures than {spec.nodes - 1}; "
                            "use an odd number")
    return spec


def _cluster(name: str, node: _Node, zookeeper: ZooKeeperSpec, datacenter: bool) -> ClusterSpec:
    external = node.get("zookeeper", _text, None)
    emulators = None
    if datacenter and node.has("emulators"):
        emulator_node = node.child("emulators")
        emulators = EmulatorSpec(emulator_node.get("servers", _integer(1, 1000), 4),
                                 emulator_node.get("rate", _positive, 200.0),
                                 emulator_node.get("metrics_port", _port, 9301),
                                 emulator_node.get("members", _integer(1), 1_000_000),
                                 emulator_node.get("settings", _settings, {}))
        emulator_node.done()
    spec = ClusterSpec(name, node.get("brokers", _integer(1, 32), ClusterSpec.brokers), node.get("port", _port, 9092),
                       node.get("metrics_port", _port, 9201), node.get("partitions", _integer(1, 1000), 4),
                       node.get("chroot", _chroot, f"/{name}"), external, node.get("settings", _settings, {}),
                       emulators,
                       node.get("replication_factor", _integer(1, 32), ClusterSpec.replication_factor),
                       node.get("min_insync_replicas", _integer(1, 32), ClusterSpec.min_insync_replicas),
                       node.get("log_retention_hours", _integer(1), ClusterSpec.log_retention_hours),
                       node.get("log_retention_bytes", _retention_bytes, ClusterSpec.log_retention_bytes),
                       node.get("log_segment_bytes", _segment_bytes, ClusterSpec.log_segment_bytes),
                       node.get("audit_retention_hours", _integer(1), ClusterSpec.audit_retention_hours))
    node.done()
    _check_replication(spec, node.where)
    return spec


def _check_replication(spec: ClusterSpec, where: str) -> None:
    """The replication a cluster's topics get must fit its brokers (those of an external cluster are not known)."""
    if spec.min_insync_replicas > spec.replication_factor:
        raise TopologyError(f"{where}.min_insync_replicas: {spec.min_insync_replicas} in-sync replicas cannot be "
                            f"asked of topics with replication_factor {spec.replication_factor}")
    if not spec.external and spec.replication_factor > spec.brokers:
        raise TopologyError(f"{where}.replication_factor: {spec.replication_factor} replicas need as many brokers "
                            f"and the cluster has {spec.brokers}: add brokers, or lower replication_factor (and "
                            f"min_insync_replicas, {spec.min_insync_replicas} now)")


def _check_ports(topology: Topology) -> None:
    seen: dict[int, str] = {}
    for port, what in topology.ports():
        if port in seen:
            raise TopologyError(f"port {port} is given to both {seen[port]} and {what}")
        seen[port] = what
