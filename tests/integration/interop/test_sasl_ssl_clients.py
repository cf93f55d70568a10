"""kcat, confluent-kafka, kafka-python and aiokafka over a SASL_SSL listener with SCRAM-SHA-512: produce and consume,
and a wrong password refused over TLS as over plaintext."""

from __future__ import annotations

import pytest

from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import AuthenticationError
from pipeline.protocol.api_keys import ApiKey
from pipeline.security.client_settings import ClientSecurity
from tests.support import sasl
from tests.support.clients import (
    aiokafka_round_trip,
    confluent_consume,
    create_topic,
    kafka_python_round_trip,
    run_kcat,
)
from tests.support.ports import free_port
from tests.support.tls import TestPki, aiokafka_settings, kafka_python_settings, kcat_args, librdkafka_settings

USERS = {"alice": "alice-secret"}
MESSAGES = [f"sasl over tls {i}".encode() for i in range(200)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> TestPki:
    return TestPki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def broker(broker_factory, pki):
    """A standalone broker with PLAINTEXT (for the test's own admin) and SASL_SSL listeners, knowing USERS."""
    port, sasl_ssl_port = free_port(), free_port()
    broker = broker_factory(port=port, start=False, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "ssl.keystore.location": str(pki.broker.bundle)})
    sasl.seed_users(broker.log_dir, USERS)
    broker.start()
    broker.sasl_ssl_bootstrap = f"127.0.0.1:{sasl_ssl_port}"
    return broker


def rdkafka(pki: TestPki, password: str = USERS["alice"]) -> dict:
    return {**librdkafka_settings(pki), **sasl.librdkafka_settings("alice", password), "security.protocol": "sasl_ssl"}


def python_client(pki: TestPki, settings_of) -> dict:
    return {**settings_of(pki), **sasl.kafka_python_settings("alice", USERS["alice"]), "security_protocol": "SASL_SSL"}


def test_kcat(broker, pki):
    create_topic(broker.bootstrap, "kcat-sasl-ssl", 1)
    security = kcat_args(rdkafka(pki))
    run_kcat(["-b", broker.sasl_ssl_bootstrap, *security, "-P", "-t", "kcat-sasl-ssl"],
             input_bytes=b"\n".join(MESSAGES) + b"\n")
    output = run_kcat(["-b", broker.sasl_ssl_bootstrap, *security, "-C", "-t", "kcat-sasl-ssl", "-o", "beginning",
                       "-e", "-q"])
    assert output.splitlines() == MESSAGES
    with pytest.raises(AssertionError, match="Authentication failed|SASL authentication error"):
        run_kcat(["-b", broker.sasl_ssl_bootstrap, *kcat_args(rdkafka(pki, "wrong")), "-L", "-m", "5"], timeout=30)


def test_confluent_kafka(broker, pki):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.sasl_ssl_bootstrap, "acks": "all", **rdkafka(pki)})
    for value in MESSAGES:
        producer.produce("confluent-sasl-ssl", value, partition=0)
    assert producer.flush(30) == 0
    records = confluent_consume(broker.sasl_ssl_bootstrap, "confluent-sasl-ssl", [0], len(MESSAGES), **rdkafka(pki))
    assert [r.value for r in records] == MESSAGES


def test_kafka_python(broker, pki):
    create_topic(broker.bootstrap, "kafka-python-sasl-ssl", 1)
    settings = python_client(pki, kafka_python_settings)
    assert kafka_python_round_trip(broker.sasl_ssl_bootstrap, "kafka-python-sasl-ssl", MESSAGES, **settings) == MESSAGES


def test_aiokafka(broker, pki):
    create_topic(broker.bootstrap, "aiokafka-sasl-ssl", 1)
    received = aiokafka_round_trip(broker.sasl_ssl_bootstrap, "aiokafka-sasl-ssl", MESSAGES,
                                   lambda: python_client(pki, aiokafka_settings))
    assert received == MESSAGES


def test_our_client(broker, pki):
    host, port = broker.sasl_ssl_bootstrap.split(":")

    def security(password: str) -> ClientSecurity:
        return ClientSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="alice", password=password,
                              ca_file=pki.ca_file)
    with BrokerConnection(host, int(port), security=security(USERS["alice"])) as connection:
        assert connection.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False})["brokers"]
    with pytest.raises(AuthenticationError):
        BrokerConnection(host, int(port), security=security("nope")).connect()
