"""The clients' security settings: Kafka's and librdkafka's names, JAAS logins, and what is refused."""

from __future__ import annotations

import pytest

from pipeline.client.consumer_config import ConsumerConfig
from pipeline.client.producer_config import ProducerConfig
from pipeline.config import ConfigError
from pipeline.security.client_settings import ClientSecurity


def test_defaults_are_plaintext_with_hostname_verification():
    security = ProducerConfig({"bootstrap.servers": "h:1"}).security
    assert (security.protocol, security.uses_ssl, security.uses_sasl, security.check_hostname) == \
        ("PLAINTEXT", False, False, True)


def test_java_and_librdkafka_names_give_the_same_settings():
    java = ConsumerConfig({"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                           "ssl.truststore.location": "/ca.pem",
                           "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                               'username="alice" password="a\\"b";'}).security
    rdkafka = ConsumerConfig({"security.protocol": "SASL_SSL", "sasl.mechanisms": "scram-sha-512",
                              "ssl.ca.location": "/ca.pem", "sasl.username": "alice",
                              "sasl.password": 'a"b'}).security
    assert java == rdkafka
    assert (java.uses_ssl, java.uses_sasl, java.username, java.password) == (True, True, "alice", 'a"b')
    assert "a\"b" not in repr(java)


def test_sasl_without_credentials_and_unknown_values_are_refused():
    with pytest.raises(ConfigError, match="needs sasl.username"):
        ClientSecurity.from_values({"security.protocol": "SASL_PLAINTEXT"})
    with pytest.raises(ConfigError, match="security.protocol"):
        ProducerConfig({"bootstrap.servers": "h:1", "security.protocol": "TLS"})
    with pytest.raises(ConfigError, match="sasl.mechanism"):
        ProducerConfig({"bootstrap.servers": "h:1", "sasl.mechanism": "GSSAPI"})
    assert not ClientSecurity.from_values({"ssl.endpoint.identification.algorithm": "none"}).check_hostname


def test_a_missing_ca_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot set up TLS"):
        ClientSecurity(protocol="SSL", ca_file=str(tmp_path / "missing.pem")).ssl_context()
