"""The secured deployment's secrets and settings: made once under var/secrets (0700, files 0600) and never replaced,
each program's settings file, the services' client properties, Prometheus's HTTPS scrapes, and the topology's
security switch."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from audit.config import AuditConfig
from broker.config import KafkaConfig
from etl.config import EtlConfig
from infra.deployment import secured
from infra.deployment.programs import programs, scrape_jobs
from infra.deployment.secrets import ADMIN, KAFKA_USERS, SERVICE_USERS, ensure
from infra.deployment.topology import DEFAULT_TOPOLOGY, Topology, TopologyError, load
from infra.prometheus.config import render
from mirror.config import MirrorConfig
from pipeline.config import read_properties_file
from pipeline.security.command_config import read_command_config
from producers.config import EmulatorConfig
from schemas.registry.config import RegistryConfig
from schemas.registry_client_settings import RegistryClientSettings


def topology_at(tmp_path: Path, **changes: object) -> Topology:
    document = yaml.safe_load(DEFAULT_TOPOLOGY.read_text())
    document["var_dir"] = str(tmp_path / "var")
    document.update(changes)
    path = tmp_path / "topology.yml"
    path.write_text(yaml.safe_dump(document))
    return load(path)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    """A secured topology whose secrets and settings files are written (hashing the users' passwords takes a
    moment: once per module)."""
    topology = topology_at(tmp_path_factory.mktemp("secured"))
    found = ensure(topology)
    secured.write_client_properties(found)
    secured.write_service_configs(topology, found, programs(topology))
    return topology


def test_security_is_on_by_default_and_can_be_switched_off(tmp_path: Path) -> None:
    assert load().security and load().registry_url.startswith("https://")
    off = topology_at(tmp_path, security="off")
    assert not off.security and off.registry_url.startswith("http://") and off.dashboard_url.startswith("http://")
    assert not any("--config" in program.command for program in programs(off))
    assert all(job.login is None and job.scheme == "http" for job in scrape_jobs(off))
    with pytest.raises(TopologyError, match="security: must be on or off"):
        topology_at(tmp_path, security="maybe")


def test_secrets_are_owner_only_and_never_replaced(deployment: Topology) -> None:
    directory = deployment.secrets_dir
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = [path for path in directory.rglob("*") if path.is_file()]
    assert files and all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in files)
    passwords = json.loads((directory / "passwords.json").read_text())
    assert set(passwords) == set(SERVICE_USERS) and len(set(passwords.values())) == len(SERVICE_USERS)
    before = {path: path.read_bytes() for path in files}
    again = ensure(deployment)
    secured.write_client_properties(again)
    secured.write_service_configs(deployment, again, programs(deployment))
    assert {path: path.read_bytes() for path in files} == before


def test_every_broker_listens_on_sasl_ssl_with_the_authorizer(deployment: Topology) -> None:
    broker = next(p for p in programs(deployment) if p.name == "broker-dc1-1")
    config_file = Path(broker.command[broker.command.index("--config") + 1])
    settings = read_properties_file(config_file)
    assert settings["listeners"] == "SASL_SSL://127.0.0.1:9092" == settings["advertised.listeners"]
    assert settings["sasl.enabled.mechanisms"] == "SCRAM-SHA-512" and settings["zookeeper.set.acl"] == "true"
    assert settings["super.users"] == "User:broker;User:admin"
    assert settings["allow.everyone.if.no.acl.found"] == "false"
    assert 'username="broker"' in settings["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert Path(settings["ssl.keystore.location"]).exists() and Path(settings["ssl.truststore.location"]).exists()
    # no secret on a command line
    password = json.loads((deployment.secrets_dir / "passwords.json").read_text())["broker"]
    assert all(password not in " ".join(program.command) for program in programs(deployment))


def test_each_service_reads_its_own_login_from_its_settings_file(deployment: Topology) -> None:
    def settings(name: str) -> dict[str, str]:
        return read_properties_file(secured.service_config(deployment, name))

    emulators = EmulatorConfig({**settings("emulators-dc1"), "zookeeper.connect": "zk:2181/dc1"})
    assert (emulators.security.protocol, emulators.security.username) == ("SASL_SSL", "emulators")
    assert RegistryClientSettings.from_config(emulators).username == "emulators"
    mirror = MirrorConfig({**settings("mirror"), "source.clusters": "dc1=zk:2181/dc1",
                           "target.zookeeper.connect": "zk:2181/offline", "whitelist": ".*"})
    assert mirror.consumer_config("dc1").security.username == "mirror" == mirror.producer_config().security.username
    assert mirror.consumer_config("dc1").zookeeper_security.set_acl
    audit = AuditConfig({**settings("audit"), "offline.zookeeper.connect": "zk:2181/offline", "state.dir": "/s"})
    assert audit.security.username == "audit" and audit.http_security.basic and audit.http_security.keystore
    etl = EtlConfig({**settings("etl"), "zookeeper.connect": "zk:2181/offline", "warehouse.dir": "/w"})
    assert etl.security.username == "etl" and etl.zookeeper_security.set_acl
    registry = RegistryConfig(settings("registry"))
    assert registry.security.basic and registry.listeners[0].scheme == "https" and registry.zookeeper_security.set_acl
    broker = KafkaConfig(settings("broker-offline-2"))
    assert broker["zookeeper.set.acl"] and broker.authorizer_enabled
    inter_broker = broker.inter_broker_security()
    assert (inter_broker.protocol, inter_broker.username, inter_broker.sasl_mechanism) == ("SASL_SSL", "broker",
                                                                                           "SCRAM-SHA-512")


def test_people_use_admin_properties(deployment: Topology) -> None:
    command = read_command_config(deployment.secrets_dir / "admin.properties")
    assert (command.client.protocol, command.client.username) == ("SASL_SSL", ADMIN)
    assert command.zookeeper.set_acl
    assert secured.admin_command_config(deployment) == command
    assert all((deployment.secrets_dir / f"{user}.password").exists() for user in KAFKA_USERS)


def test_prometheus_scrapes_the_registry_and_the_audit_over_https(deployment: Topology) -> None:
    jobs = {job.name: job for job in scrape_jobs(deployment)}
    assert jobs["audit"].login is not None and jobs["schema-registry"].scheme == "https"
    assert jobs["broker"].login is None and jobs["broker"].scheme == "http"
    document = yaml.safe_load(render(list(jobs.values())))
    audit = next(c for c in document["scrape_configs"] if c["job_name"] == "audit")
    assert audit["scheme"] == "https" and audit["basic_auth"]["username"] == "prometheus"
    assert Path(audit["basic_auth"]["password_file"]).exists() and Path(audit["tls_config"]["ca_file"]).exists()
