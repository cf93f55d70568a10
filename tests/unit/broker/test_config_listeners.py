"""Listener settings as Kafka validates them: several listeners, custom names, the inter-broker listener, advertised
endpoints, and the inter-broker client's security."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, KafkaConfig
from broker.security.listeners import EndPoint


def test_host_name_and_port_make_one_plaintext_listener():
    config = KafkaConfig({"host.name": "0.0.0.0", "port": "9999", "advertised.host.name": "kafka1"})
    assert config.listeners == [EndPoint("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9999)]
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert config.advertised_listeners({"PLAINTEXT": 9999}) == [EndPoint("PLAINTEXT", "PLAINTEXT", "kafka1", 9999)]


def test_advertised_host_name_is_what_a_bound_host_name_advertises():
    # Kafka's older settings, which the fault-proxy tests use: bind 127.0.0.2, tell clients 127.0.0.1.
    config = KafkaConfig({"host.name": "127.0.0.2", "port": "9999", "advertised.host.name": "127.0.0.1"})
    assert config.advertised_listeners({"PLAINTEXT": 9999}) == [
        EndPoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9999)]
    # With listeners, a named host is advertised as it is, unless advertised.listeners says otherwise.
    named = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.2:9999", "advertised.host.name": "127.0.0.1"})
    assert named.advertised_listeners({"PLAINTEXT": 9999})[0].host == "127.0.0.2"


def test_several_listeners_with_custom_names():
    config = KafkaConfig({"listeners": "INTERNAL://127.0.0.1:9093,external://:9094,SSL://[::1]:0",
                          "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SSL"})
    assert [(e.listener_name, e.security_protocol, e.host, e.port) for e in config.listeners] == [
        ("INTERNAL", "SASL_SSL", "127.0.0.1", 9093), ("EXTERNAL", "SSL", "", 9094), ("SSL", "SSL", "::1", 0)]
    # No PLAINTEXT listener: the first one serves the other brokers.
    assert config.inter_broker_listener_name == "INTERNAL"
    advertised = config.advertised_listeners({"INTERNAL": 9093, "EXTERNAL": 9094, "SSL": 41000})
    assert [str(e) for e in advertised] == ["INTERNAL://127.0.0.1:9093", "EXTERNAL://127.0.0.1:9094",
                                            "SSL://[::1]:41000"]


def test_plaintext_is_the_default_inter_broker_listener_when_listed():
    config = KafkaConfig({"listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"})
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert config.inter_broker_listener.port == 9092
    named = KafkaConfig({"listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                         "inter.broker.listener.name": "ssl"})
    assert named.inter_broker_listener_name == "SSL"
    by_protocol = KafkaConfig({"listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                               "security.inter.broker.protocol": "SSL"})
    assert by_protocol.inter_broker_listener_name == "SSL"


def test_advertised_listeners_replace_the_bound_address():
    config = KafkaConfig({"listeners": "PLAINTEXT://0.0.0.0:0,SSL://0.0.0.0:0",
                          "advertised.listeners": "SSL://broker1.example:9093"})
    assert [str(e) for e in config.advertised_listeners({"PLAINTEXT": 40000, "SSL": 40001})] == [
        "PLAINTEXT://127.0.0.1:40000", "SSL://broker1.example:9093"]


@pytest.mark.parametrize("values,words", [
    ({"listeners": "SSL://a:1,SSL://a:2"}, "names listener SSL twice"),
    ({"listeners": "PLAINTEXT://a:1,SSL://a:1"}, "each listener needs a port of its own"),
    ({"listeners": "FOO://a:1"}, "listener FOO is neither a security protocol"),
    ({"listeners": "SSL:/a:1"}, "expected NAME://host:port"),
    ({"listeners": "SSL://a:99999"}, "out of range"),
    ({"listeners": "SSL://a:1", "inter.broker.listener.name": "PLAINTEXT"}, "not among the listeners"),
    ({"listeners": "SSL://a:1", "advertised.listeners": "PLAINTEXT://b:1"}, "which is not among the listeners"),
    ({"listeners": "SSL://a:1", "advertised.listeners": "SSL://0.0.0.0:1"}, "wildcard"),
    ({"listeners": "SSL://a:1", "security.inter.broker.protocol": "SASL_SSL"}, "not among the listeners"),
    ({"listeners": "SSL://a:1", "security.inter.broker.protocol": "SSL", "inter.broker.listener.name": "SSL"},
     "not both"),
    ({"listener.security.protocol.map": "INTERNAL:TLS"}, "unknown security protocol"),
    ({"listener.security.protocol.map": "A:SSL,A:SASL_SSL"}, "names listener A twice"),
    ({"ssl.client.auth": "always"}, "expected one of"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.2 and/or TLSv1.3"),
])
def test_invalid_listener_settings_are_one_clear_error(values, words):
    with pytest.raises(ConfigError, match=words):
        KafkaConfig(values)


def test_inter_broker_security_follows_the_inter_broker_listener():
    plain = KafkaConfig({"listeners": "PLAINTEXT://a:1,SSL://a:2", "ssl.truststore.location": "/ca.pem"})
    assert plain.inter_broker_security().protocol == "PLAINTEXT"
    assert not plain.inter_broker_security().ca_file
    tls = KafkaConfig({"listeners": "PLAINTEXT://a:1,SSL://a:2", "inter.broker.listener.name": "SSL",
                       "ssl.truststore.location": "/ca.pem", "ssl.keystore.location": "/broker.pem"})
    security = tls.inter_broker_security()
    assert (security.protocol, security.ca_file, security.cert_file, security.check_hostname) == (
        "SSL", "/ca.pem", "", True)
    mutual = KafkaConfig({"listeners": "SSL://a:2", "ssl.client.auth": "required", "ssl.truststore.location": "/ca.pem",
                          "ssl.keystore.location": "/broker.pem", "ssl.endpoint.identification.algorithm": ""})
    security = mutual.inter_broker_security()
    assert (security.cert_file, security.check_hostname) == ("/broker.pem", False)


def test_inter_broker_security_over_sasl_ssl_has_the_login_and_the_tls_fields():
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-secret";'
    config = KafkaConfig({"listeners": "EXTERNAL://a:1,INTERNAL://a:2",
                          "listener.security.protocol.map": "EXTERNAL:SSL,INTERNAL:SASL_SSL",
                          "inter.broker.listener.name": "INTERNAL", "ssl.truststore.location": "/ca.pem",
                          "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas})
    security = config.inter_broker_security()
    assert (security.protocol, security.username, security.password, security.ca_file, security.cert_file) == (
        "SASL_SSL", "broker", "b-secret", "/ca.pem", "")
