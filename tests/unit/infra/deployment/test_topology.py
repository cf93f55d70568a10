"""infra/topology.yml and what the deployment makes of it: the topology read and checked whole, the programs with
their command lines, supervisord's configuration (parsed by supervisord's own option parser) and Prometheus's
targets (promtool checks them in tests/integration/infra/deployment/test_topology.py)."""

from __future__ import annotations

import shlex
from configparser import ConfigParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from supervisor.datatypes import RestartUnconditionally
from supervisor.options import ServerOptions

from audit.config import AUDIT_PROPERTIES, AuditConfig
from broker.config import KafkaConfig
from etl.config import ETL_PROPERTIES, EtlConfig
from infra.deployment.lifecycle import wanted_topics
from infra.deployment.programs import STAGES, programs, scrape_jobs
from infra.deployment.supervisor import render
from infra.deployment.topology import DEFAULT_TOPOLOGY, REPO_ROOT, TopologyError, load
from mirror.config import MIRROR_PROPERTIES, MirrorConfig
from pipeline.zk.server import ZooKeeperServer
from producers.config import EMULATOR_PROPERTIES
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS


def write_topology(tmp_path: Path, **changes: Any) -> Path:
    """The default topology with ``changes`` merged in (a None value deletes the key), under tmp_path."""
    document = yaml.safe_load(DEFAULT_TOPOLOGY.read_text())
    document["var_dir"] = str(tmp_path / "var")
    _merge(document, changes)
    path = tmp_path / "topology.yml"
    path.write_text(yaml.safe_dump(document))
    return path


def _merge(target: dict, changes: dict) -> None:
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def test_the_default_topology_is_the_paper_s_deployment_on_loopback_ports() -> None:
    topology = load()
    assert topology.var_dir == REPO_ROOT / "var"
    assert [c.name for c in topology.clusters] == ["dc1", "dc2", "offline"]
    assert [(c.brokers, c.chroot) for c in topology.clusters] == [(3, "/dc1"), (3, "/dc2"), (3, "/offline")]
    # one broker of any cluster may die: three replicas of every topic, acks=all writes need two
    assert {(c.replication_factor, c.min_insync_replicas) for c in topology.clusters} == {(3, 2)}
    assert topology.cluster_zookeeper(topology.offline) == "127.0.0.1:2181/offline"
    assert [dc.emulators is not None for dc in topology.datacenters] == [True, True]
    assert topology.offline.emulators is None
    ports = [port for port, _ in topology.ports()]
    assert len(ports) == len(set(ports)) == 26
    names = [program.name for program in programs(topology)]
    assert names == ["zookeeper-1", *[f"broker-{c}-{b}" for c in ("dc1", "dc2", "offline") for b in (1, 2, 3)],
                     "registry", "prometheus", "audit", "mirror", "emulators-dc1", "emulators-dc2", "etl"]
    stages = [STAGES.index(program.stage) for program in programs(topology)]
    assert stages == sorted(stages)


def test_every_program_s_command_line_names_its_cluster_and_ports() -> None:
    topology = load()
    commands = {program.name: program.command for program in programs(topology)}
    broker = commands["broker-dc2-2"]
    assert broker[1:3] == ("-m", "broker")
    assert {"zookeeper.connect=127.0.0.1:2181/dc2", "broker.id=2", "metrics.port=9212", "num.partitions=4"} <= set(broker)
    assert broker[broker.index("--port") + 1] == "9096"
    mirror = commands["mirror"]
    assert "--source=dc1=127.0.0.1:2181/dc1" in mirror and "--source=dc2=127.0.0.1:2181/dc2" in mirror
    assert mirror[mirror.index("--target") + 1] == "127.0.0.1:2181/offline"
    # Exactly once by default, under a process id that a restart keeps (so that it fences its predecessor).
    assert {"exactly.once=true", "process.id=mirror"} <= set(mirror)
    etl = commands["etl"]
    assert etl[etl.index("--every") + 1] == "5m" and f"--warehouse" in etl and "audit.window.ms=60000" in etl
    audit = commands["audit"]
    assert f"warehouse.dir={REPO_ROOT / 'var' / 'warehouse'}" in audit and "prometheus.url=http://127.0.0.1:9090" in audit
    emulators = commands["emulators-dc1"]
    assert emulators[emulators.index("--rate") + 1] == "200" and "--audit-window-ms" in emulators


def test_the_mirror_may_be_switched_back_to_at_least_once(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, mirror={"exactly_once": "off"}))
    assert not topology.mirror.exactly_once
    assert "exactly.once=false" in next(p for p in programs(topology) if p.name == "mirror").command


def test_supervisord_accepts_the_generated_configuration(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, mirror={"settings": {"producer.client.id": "mirror-100%"}}))
    text = render(topology, programs(topology))
    topology.supervisor_dir.mkdir(parents=True)
    topology.logs_dir.mkdir()
    path = tmp_path / "supervisord.conf"
    path.write_text(text)
    options = ServerOptions()
    options.realize(args=["-c", str(path)])
    parsed = {group.name: group.process_configs[0] for group in options.process_group_configs}
    assert set(parsed) == {program.name for program in programs(topology)}
    for program in programs(topology):
        config = parsed[program.name]
        # supervisord splits the command line back into exactly the program's arguments (% escaped and all)
        assert shlex.split(config.command) == list(program.command)
        assert not config.autostart and config.autorestart is RestartUnconditionally
        assert config.priority == program.priority
        assert config.stopwaitsecs == program.stop_wait_s
        assert config.stdout_logfile == str(topology.logs_dir / f"{program.name}.log")
        assert config.killasgroup and not config.stopasgroup
    assert "producer.client.id=mirror-100%" in parsed["mirror"].command
    assert parsed["etl"].environment["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert parsed["zookeeper-1"].exitcodes == [0, 143]
    sections = ConfigParser(interpolation=None)
    sections.read_string(text)
    assert sections["unix_http_server"]["file"] == str(topology.supervisor_dir / "supervisor.sock")


def test_a_three_node_ensemble_gets_its_peers(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, zookeeper={"nodes": 3}))
    assert topology.zookeeper_connect == "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
    assert topology.cluster_zookeeper(topology.datacenters[0]) == "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183/dc1"
    nodes = [p for p in programs(topology) if p.stage == "zookeeper"]
    assert [p.name for p in nodes] == ["zookeeper-1", "zookeeper-2", "zookeeper-3"]
    third = nodes[2].command
    assert third[third.index("--server-id") + 1] == "3"
    assert third[third.index("--peers") + 1] == "1:2888:3888,2:2889:3889,3:2890:3890"
    assert third[third.index("--port") + 1] == "2183"


def test_external_services_are_used_and_not_started(tmp_path: Path) -> None:
    topology = load(write_topology(
        tmp_path, zookeeper={"connect": "zk.example.com:2181"}, registry={"url": "http://registry.example.com:8081"},
        prometheus={"url": "http://prometheus.example.com:9090"},
        datacenters={"dc2": {"zookeeper": "zk2.example.com:2181/dc2"}}))
    names = {p.name for p in programs(topology)}
    assert not {"zookeeper-1", "registry", "prometheus", "broker-dc2-1", "broker-dc2-2"} & names
    assert {"broker-dc1-1", "emulators-dc2", "mirror"} <= names
    mirror = next(p for p in programs(topology) if p.name == "mirror").command
    assert "--source=dc2=zk2.example.com:2181/dc2" in mirror and "--source=dc1=zk.example.com:2181/dc1" in mirror
    assert mirror[mirror.index("--registry") + 1] == "http://registry.example.com:8081"
    assert "prometheus.url=http://prometheus.example.com:9090" in next(p for p in programs(topology)
                                                                      if p.name == "audit").command
    assert "prometheus" not in {job.name for job in scrape_jobs(topology)}


@pytest.mark.parametrize("changes, message", [
    ({"datacenters": {"dc1": {"brokerz": 3}}}, "datacenters.dc1.brokerz: unknown key"),
    ({"datacenters": {"dc1": {"brokers": 0}}}, "datacenters.dc1.brokers: must be an integer from 1"),
    ({"datacenters": {"dc1": {"port": 70000}}}, "datacenters.dc1.port: must be an integer from 1 to 65535"),
    ({"datacenters": {"dc2": {"port": 9093}}}, "port 9093 is given to both broker 2 of dc1 and broker 1 of dc2"),
    ({"audit": {"http_port": 9090}}, "port 9090 is given to both audit and prometheus"),
    ({"zookeeper": {"nodes": 2}}, "zookeeper.nodes: 2 nodes"),
    ({"datacenters": {"offline": {"brokers": 1}}}, "datacenters.offline: a datacenter's name"),
    ({"datacenters": {"DC-3": {"brokers": 1}}}, "datacenters.DC-3: a datacenter's name"),
    ({"offline": {"emulators": {"rate": 5}}}, "offline.emulators: unknown key"),
    ({"etl": {"every": "soon"}}, "etl.every: 'soon' is not a duration"),
    ({"prometheus": {"scrape_interval": "1.5s"}}, "prometheus.scrape_interval: Prometheus durations are whole"),
    ({"registry": {"url": "registry:8081"}}, "registry.url: must be http://HOST:PORT"),
    ({"datacenters": {"dc1": {"chroot": "dc1"}}}, "datacenters.dc1.chroot: a chroot is /NAME"),
    ({"datacenters": {"dc1": {"emulators": {"rate": -1}}}}, "datacenters.dc1.emulators.rate: must be a positive"),
    ({"mirror": {"settings": ["a"]}}, "mirror.settings: must be a mapping"),
    ({"colour": "blue"}, "colour: unknown key"),
    ({"datacenters": {"dc2": {"brokers": 2}}},
     "datacenters.dc2.replication_factor: 3 replicas need as many brokers and the cluster has 2"),
    ({"offline": {"min_insync_replicas": 3, "replication_factor": 2}},
     "offline.min_insync_replicas: 3 in-sync replicas cannot be asked of topics with replication_factor 2"),
    ({"datacenters": {"dc1": {"replication_factor": 0}}}, "datacenters.dc1.replication_factor: must be an integer"),
    ({"datacenters": {"dc1": {"log_retention_bytes": "lots"}}}, "datacenters.dc1.log_retention_bytes: 'lots' is "
                                                                 "not a size"),
    ({"offline": {"log_segment_bytes": "4KB"}}, "offline.log_segment_bytes: a log segment is from 1MB"),
    ({"offline": {"audit_retention_hours": 0}}, "offline.audit_retention_hours: must be an integer from 1"),
    ({"prometheus": {"retention_size": "1.5GB"}}, "prometheus.retention_size: '1.5GB' is not a size"),
    ({"prometheus": {"retention_time": "a week"}}, "prometheus.retention_time: 'a week' is not a duration"),
    ({"logs": {"backups": -1}}, "logs.backups: must be an integer from 0"),
    ({"zookeeper": {"snapshots_kept": 2}}, "zookeeper.snapshots_kept: must be an integer from 3"),
])
def test_a_wrong_topology_is_refused_naming_the_key(tmp_path: Path, changes: dict, message: str) -> None:
    path = write_topology(tmp_path, **changes)
    with pytest.raises(TopologyError) as raised:
        load(path)
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value), str(raised.value)


def test_a_missing_or_broken_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read it"):
        load(tmp_path / "nowhere.yml")
    broken = tmp_path / "broken.yml"
    broken.write_text("datacenters: [unclosed\n")
    with pytest.raises(TopologyError, match="not YAML"):
        load(broken)
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    with pytest.raises(TopologyError, match="datacenters: at least one datacenter"):
        load(empty)


def test_every_cluster_s_replication_and_retention_reach_its_brokers_and_topics(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, datacenters={"dc2": {
        "brokers": 1, "replication_factor": 1, "min_insync_replicas": 1, "log_retention_hours": 6,
        "log_retention_bytes": "256MB", "log_segment_bytes": 16 << 20, "audit_retention_hours": 12,
        "settings": {"log.retention.hours": 2}}}))
    commands = {program.name: program.command for program in programs(topology)}
    overrides = {a.partition("=")[0]: a.partition("=")[2] for a in commands["broker-dc1-3"] if "=" in a}
    assert {key: overrides[key] for key in ("default.replication.factor", "min.insync.replicas",
                                             "log.retention.hours", "log.retention.bytes", "log.segment.bytes",
                                             "log.roll.hours")} == {
        "default.replication.factor": "3", "min.insync.replicas": "2", "log.retention.hours": "12",
        "log.retention.bytes": str(128 << 20), "log.segment.bytes": str(32 << 20), "log.roll.hours": "12"}
    # the broker accepts them all, and a cluster's own settings have the last word
    KafkaConfig(overrides)
    small = {a.partition("=")[0]: a.partition("=")[2] for a in commands["broker-dc2-1"] if "=" in a}
    assert (small["default.replication.factor"], small["min.insync.replicas"]) == ("1", "1")
    assert (small["log.retention.hours"], small["log.retention.bytes"]) == ("2", str(256 << 20))
    assert "broker-dc2-2" not in commands
    # the topics up creates: events and AuditCount in a datacenter, AuditCount alone in the offline cluster
    dc1, dc2 = topology.datacenters
    audit_configs = {"min.insync.replicas": "2", "retention.ms": "86400000", "retention.bytes": "-1"}
    assert wanted_topics(topology, dc1) == {**{topic: {"min.insync.replicas": "2"} for topic in EVENT_TOPICS},
                                            AUDIT_TOPIC: audit_configs}
    assert wanted_topics(topology, dc2)[AUDIT_TOPIC] == {"min.insync.replicas": "1", "retention.ms": "43200000",
                                                         "retention.bytes": "-1"}
    assert wanted_topics(topology, topology.offline) == {AUDIT_TOPIC: audit_configs}


def test_an_external_cluster_s_replication_is_not_checked_against_brokers_it_does_not_run(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, datacenters={"dc2": {"zookeeper": "zk2.example.com:2181/dc2",
                                                                  "brokers": 1, "replication_factor": 5}}))
    assert topology.datacenters[1].replication_factor == 5


def test_sizes_read_as_supervisord_and_prometheus_read_them(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, logs={"max_bytes": "20MB", "backups": 5},
                                   prometheus={"retention_time": "2d", "retention_size": "512MB"},
                                   offline={"log_retention_bytes": -1}))
    assert (topology.logs.max_bytes, topology.logs.backups) == (20 << 20, 5)
    assert topology.offline.log_retention_bytes == -1
    command = next(p.command for p in programs(topology) if p.name == "prometheus")
    assert "--storage.tsdb.retention.time=2d" in command and f"--storage.tsdb.retention.size={512 << 20}B" in command


def test_supervisord_rotates_every_log_and_starts_everything_owner_only(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, logs={"max_bytes": "20MB", "backups": 3}))
    topology.supervisor_dir.mkdir(parents=True)
    topology.logs_dir.mkdir()
    path = tmp_path / "supervisord.conf"
    path.write_text(render(topology, programs(topology)))
    options = ServerOptions()
    options.realize(args=["-c", str(path)])
    assert options.umask == 0o077
    assert (options.logfile_maxbytes, options.logfile_backups) == (20 << 20, 3)
    for group in options.process_group_configs:
        config = group.process_configs[0]
        assert (config.stdout_logfile_maxbytes, config.stdout_logfile_backups) == (20 << 20, 3), group.name


def test_zookeeper_purges_its_old_snapshots_and_transaction_logs(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, zookeeper={"snapshots_kept": 5, "purge_interval_hours": 2}))
    command = next(p.command for p in programs(topology) if p.name == "zookeeper-1")
    assert command[command.index("--snapshots-kept") + 1] == "5"
    assert command[command.index("--purge-interval-hours") + 1] == "2"
    server = ZooKeeperServer(tmp_path / "zk", 2181, autopurge=(5, 2))
    lines = server.command()[-1]
    assert {"autopurge.snapRetainCount=5", "autopurge.purgeInterval=2"} <= set(Path(lines).read_text().splitlines())
    assert "autopurge" not in Path(ZooKeeperServer(tmp_path / "plain", 2181).command()[-1]).read_text()
    with pytest.raises(ValueError, match="at least 3 snapshots"):
        ZooKeeperServer(tmp_path / "zk", 2181, autopurge=(2, 1))


def test_every_http_server_is_told_the_topology_s_host(tmp_path: Path) -> None:
    topology = load(write_topology(tmp_path, host="127.0.0.2", etl={"settings": {"metrics.host": "127.0.0.3"}}))
    commands = {program.name: program.command for program in programs(topology)}
    for name in ("emulators-dc1", "emulators-dc2", "mirror"):
        assert "metrics.host=127.0.0.2" in commands[name], name
    assert "http.host=127.0.0.2" in commands["audit"]
    # the topology's own settings have the last word
    assert "metrics.host=127.0.0.3" in commands["etl"] and "metrics.host=127.0.0.2" not in commands["etl"]
    # each service takes every setting it is given
    for name, table in (("emulators-dc1", EMULATOR_PROPERTIES), ("mirror", MIRROR_PROPERTIES),
                        ("etl", ETL_PROPERTIES), ("audit", AUDIT_PROPERTIES)):
        given = {a.partition("=")[0] for a, flag in zip(commands[name][1:], commands[name]) if flag == "--set"}
        assert given <= {prop.name for prop in table}, (name, given)


def test_the_mirror_keeps_its_state_under_var_and_its_own_min_insync_replicas() -> None:
    topology = load()
    commands = {program.name: program.command for program in programs(topology)}
    mirror = commands["mirror"]
    assert mirror[mirror.index("--state-dir") + 1] == str(REPO_ROOT / "var" / "mirror")
    # the mirror leaves the target's min.insync.replicas to the offline cluster's own default, as MirrorMaker 2 does
    assert MirrorConfig({"source.clusters": "dc1=zk:2181/dc1", "target.zookeeper.connect": "zk:2181/offline",
                         "whitelist": ".*"})["topic.config.exclude"] == ("min.insync.replicas",)
    assert not any(a.startswith("topic.config.exclude=") for a in mirror)


def test_the_warehouse_s_retention_and_the_audit_s_reach_their_services(tmp_path: Path) -> None:
    def settings(program: str, topology: Any) -> dict[str, str]:
        command = next(p.command for p in programs(topology) if p.name == program)
        return dict(a.partition("=")[::2] for a in command if "=" in a and not a.startswith("-"))

    default = load(write_topology(tmp_path))
    assert settings("etl", default)["warehouse.retention"] == "168h"
    assert settings("audit", default)["retain.ms"] == str(6 * 3_600_000)
    chosen = load(write_topology(tmp_path, etl={"retention_hours": 48}, audit={"retain_hours": 2}))
    etl, audit = settings("etl", chosen), settings("audit", chosen)
    assert etl["warehouse.retention"] == "48h" and audit["retain.ms"] == str(2 * 3_600_000)
    # the services take them
    assert EtlConfig({"zookeeper.connect": "zk:2181", "warehouse.dir": "w", **etl})["warehouse.retention"] == 48 * 3600
    assert AuditConfig({"offline.zookeeper.connect": "zk:2181", "state.dir": "s", **audit})["retain.ms"] == 7_200_000
