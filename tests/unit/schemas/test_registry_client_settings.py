"""The registry client's settings: Confluent's names (and the serializers' prefixed ones) in every service's table,
the login never shown, TLS trust from a PEM file, and the settings shipped to the ETL's tasks."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pytest

from audit.config import AuditConfig
from etl.config import EtlConfig
from etl.task import TaskContext
from infra.deployment.certificates import CertificateAuthority
from mirror.config import MirrorConfig
from pipeline.config import ConfigError
from producers.config import EmulatorConfig
from schemas.registry_client import SchemaRegistryClient, _without_login
from schemas.registry_client_settings import NO_REGISTRY_SECURITY, RegistryClientSettings


def test_user_info_is_the_login_and_never_shown() -> None:
    settings = RegistryClientSettings.from_config({"basic.auth.credentials.source": "USER_INFO",
                                                   "basic.auth.user.info": "etl:pa:ss"})
    assert settings.auth == ("etl", "pa:ss")
    assert "pa:ss" not in repr(settings)
    assert RegistryClientSettings.from_config({"basic.auth.user.info": "etl:pw"}).auth == ("etl", "pw")
    assert RegistryClientSettings.from_config({}).auth is None
    # URL: the login is the URL's, as Confluent's clients read it.
    assert RegistryClientSettings.from_config({"basic.auth.credentials.source": "URL",
                                               "basic.auth.user.info": "etl:pw"}).auth is None
    with pytest.raises(ConfigError, match="user:password"):
        RegistryClientSettings.from_config({"basic.auth.user.info": "nocolon"})


@pytest.mark.parametrize("config", [EmulatorConfig, MirrorConfig, EtlConfig, AuditConfig])
def test_every_service_takes_the_settings_by_confluents_names(config: type, tmp_path: Path) -> None:
    required = {MirrorConfig: {"source.clusters": "dc1=localhost:2181/dc1", "target.zookeeper.connect": "localhost:2181/o",
                               "whitelist": ".*"},
                EtlConfig: {"zookeeper.connect": "localhost:2181/o", "warehouse.dir": str(tmp_path)},
                AuditConfig: {"offline.zookeeper.connect": "localhost:2181/o", "state.dir": str(tmp_path)},
                EmulatorConfig: {"bootstrap.servers": "localhost:9092"}}[config]
    values = config({**required, "schema.registry.basic.auth.user.info": "svc:pw",
                     "schema.registry.ssl.truststore.location": "/ca.pem"})
    settings = RegistryClientSettings.from_config(values)
    assert settings.auth == ("svc", "pw") and settings.tls.ca_file == "/ca.pem"


def test_https_trusts_the_configured_authority_and_checks_the_host(tmp_path: Path) -> None:
    authority = CertificateAuthority(tmp_path / "ca")
    client = authority.issue("client", hosts=("client",))
    settings = RegistryClientSettings.from_config({"schema.registry.ssl.ca.location": str(authority.cert_path),
                                                   "schema.registry.ssl.certificate.location": str(client.cert),
                                                   "schema.registry.ssl.key.location": str(client.key)})
    context = settings.ssl_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ConfigError, match="TLS"):
        RegistryClientSettings.from_config({"schema.registry.ssl.ca.location": str(tmp_path / "absent")}).ssl_context()
    SchemaRegistryClient("https://127.0.0.1:1", settings=settings).close()


def test_the_etl_ships_the_settings_to_its_tasks() -> None:
    settings = RegistryClientSettings.from_config({"basic.auth.user.info": "etl:pw"})
    context = TaskContext("t", "b:1", "https://r:8081", "{}", 1024, False, registry_settings=settings)
    assert pickle.loads(pickle.dumps(context)).registry_settings == settings
    assert TaskContext("t", "b:1", "u", "{}", 1, False).registry_settings == NO_REGISTRY_SECURITY


def test_messages_never_carry_a_login_of_the_url() -> None:
    assert _without_login("https://user:secret@registry:8081/x") == "https://registry:8081/x"
