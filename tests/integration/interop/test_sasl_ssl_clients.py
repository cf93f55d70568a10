"""Stock clients and ours over SASL_SSL (TLS with the broker's certificate checked, then SCRAM-SHA-512): kcat,
confluent-kafka, kafka-python and aiokafka produce and consume; a wrong password is refused over TLS too. One
broker for the module, with a PLAINTEXT listener for the harness and a SASL_SSL one for the clients."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

import pytest

from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import AuthenticationError
from pipeline.protocol.api_keys import ApiKey
from pipeline.security.client_settings import ClientSecurity
from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consume, kafka_python_consume, run_kcat
from tests.support.ports import free_port
from tests.support.sasl import seed_users
from tests.support.tls import TestPki, aiokafka_settings, kafka_python_settings, librdkafka_settings

USERS = {"alice": "alice-secret"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return TestPki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: TestPki) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("sasl-ssl")
    port, sasl_port = free_port(), free_port()
    broker = BrokerProcess(base / "logs", port=port, log_path=base / "broker.log", overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://localhost:{sasl_port}",
        "ssl.keystore.location": str(pki.broker.bundle), "ssl.truststore.location": pki.ca_file})
    broker.sasl_bootstrap = f"localhost:{sasl_port}"
    seed_users(broker.log_dir, USERS)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def librdkafka(pki: TestPki, password: str = "alice-secret") -> dict:
    return {**librdkafka_settings(pki), "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": password}


def kafka_python(pki: TestPki) -> dict:
    return {**kafka_python_settings(pki), "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}


def test_our_client_logs_in_over_tls(broker, pki):
    host, port = broker.sasl_bootstrap.split(":")
    security = ClientSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="alice",
                              password="alice-secret", ca_file=pki.ca_file)
    with BrokerConnection(host, int(port), security=security) as connection:
        assert connection.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False})["brokers"]
    with pytest.raises(AuthenticationError):
        BrokerConnection(host, int(port), security=ClientSecurity(
            protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="alice", password="nope",
            ca_file=pki.ca_file)).connect()


def test_kcat_round_trip(broker, pki):
    args = [arg for key, value in librdkafka(pki).items() for arg in ("-X", f"{key}={value}")]
    lines = [f"line-{i}" for i in range(100)]
    run_kcat(["-b", broker.sasl_bootstrap, "-P", "-t", "ssl-kcat", "-p", "0", *args],
             input_bytes="".join(f"{line}\n" for line in lines).encode())
    output = run_kcat(["-b", broker.sasl_bootstrap, "-C", "-t", "ssl-kcat", "-o", "beginning", "-e", "-q", *args])
    assert output.decode().splitlines() == lines


def test_kcat_wrong_password_is_refused(broker, pki):
    args = [arg for key, value in librdkafka(pki, "nope").items() for arg in ("-X", f"{key}={value}")]
    with pytest.raises(AssertionError, match="(?i)authentication"):
        run_kcat(["-b", broker.sasl_bootstrap, "-L", "-m", "10", *args], timeout=30)


def test_confluent_kafka_round_trip(broker, pki):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.sasl_bootstrap, **librdkafka(pki)})
    values = [f"c{i}".encode() for i in range(200)]
    for value in values:
        producer.produce("ssl-confluent", value, partition=0)
    assert producer.flush(30) == 0
    records = confluent_consume(broker.sasl_bootstrap, "ssl-confluent", [0], len(values), **librdkafka(pki))
    assert [r.value for r in records] == values


def test_kafka_python_round_trip(broker, pki):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.sasl_bootstrap, acks=1, **kafka_python(pki))
    values = [f"k{i}".encode() for i in range(100)]
    for value in values:
        producer.send("ssl-kafka-python", value, partition=0)
    producer.flush(30)
    producer.close()
    records = kafka_python_consume(broker.sasl_bootstrap, "ssl-kafka-python", [0], len(values), **kafka_python(pki))
    assert [r.value for r in records] == values


def test_aiokafka_round_trip(broker, pki):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    values = [f"a{i}".encode() for i in range(50)]

    async def run() -> list[bytes]:
        settings = {**aiokafka_settings(pki), "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
        producer = AIOKafkaProducer(bootstrap_servers=broker.sasl_bootstrap, **settings)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait("ssl-aiokafka", value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.sasl_bootstrap, enable_auto_commit=False, **settings)
        await consumer.start()
        got: list[bytes] = []
        try:
            partition = TopicPartition("ssl-aiokafka", 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            deadline = time.monotonic() + 30
            while len(got) < len(values) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got.extend(m.value for messages in batches.values() for m in messages)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == values
