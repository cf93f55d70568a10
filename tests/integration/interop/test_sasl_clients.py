"""Stock clients over SASL_PLAINTEXT: kcat (librdkafka), confluent-kafka, kafka-python and aiokafka produce and
consume with SCRAM-SHA-512 (and PLAIN and SCRAM-SHA-256 with confluent-kafka); a wrong password and an unknown
user are refused with the errors those clients raise; confluent-kafka reauthenticates on its connection when the
broker's session lifetime (connections.max.reauth.ms) runs out."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.broker_metrics import scrape, value
from tests.support.clients import confluent_consume, kafka_python_consume, run_kcat
from tests.support.sasl import kafka_python_settings, librdkafka_settings, sasl_broker

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture
def broker(broker_factory):
    return sasl_broker(broker_factory, USERS)


def kcat_sasl(user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> list[str]:
    return [arg for key, value in librdkafka_settings(user, password, mechanism).items() for arg in ("-X", f"{key}={value}")]


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], **settings: object) -> None:
    from confluent_kafka import Producer

    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert errors == []


def test_kcat_produces_and_consumes_with_scram_sha_512(broker):
    lines = [f"kcat-{i}" for i in range(200)]
    run_kcat(["-b", broker.bootstrap, "-P", "-t", "sasl-kcat", "-p", "0", *kcat_sasl("alice", "alice-secret")],
             input_bytes="".join(f"{line}\n" for line in lines).encode())
    output = run_kcat(["-b", broker.bootstrap, "-C", "-t", "sasl-kcat", "-o", "beginning", "-e", "-q",
                       *kcat_sasl("bob", "bob-secret")])
    assert output.decode().splitlines() == lines


def test_kcat_with_a_wrong_password_is_refused(broker):
    with pytest.raises(AssertionError, match="(?i)authentication failed|invalid credentials"):
        run_kcat(["-b", broker.bootstrap, "-L", "-m", "10", *kcat_sasl("alice", "wrong")], timeout=30)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_produces_and_consumes(broker, mechanism):
    topic = f"sasl-confluent-{mechanism.lower()}"
    values = [f"m{i}".encode() for i in range(300)]
    settings = librdkafka_settings("alice", "alice-secret", mechanism)
    confluent_produce(broker.bootstrap, topic, values, **settings)
    records = confluent_consume(broker.bootstrap, topic, [0], len(values), **settings)
    assert [r.value for r in records] == values


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "x")])
def test_confluent_kafka_reports_an_authentication_error(broker, user, password):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "error_cb": errors.append,
                         **librdkafka_settings(user, password)})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "Authentication failed" in errors[0].str()


def test_confluent_kafka_reauthenticates_on_its_connection(broker_factory):
    from confluent_kafka import Producer

    broker = sasl_broker(broker_factory, USERS, {"connections.max.reauth.ms": 2000, "metrics.port": 0})
    settings = librdkafka_settings("alice", "alice-secret")
    producer = Producer({"bootstrap.servers": broker.bootstrap, **settings})
    errors: list[object] = []
    deadline = time.monotonic() + 6
    sent = 0
    while time.monotonic() < deadline:
        producer.produce("sasl-reauth", f"r{sent}".encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
        sent += 1
        producer.poll(0.1)
    assert producer.flush(20) == 0
    assert errors == []
    samples = scrape(broker)
    logins = value(samples, "kafka_server_socket_server_metrics_successful_authentication_total", listener="SASL_PLAINTEXT",
                   mechanism="SCRAM-SHA-512")
    connections = value(samples, "kafka_server_socket_server_metrics_connection_creation_total")
    # Every connection logged in again on itself, more than once, in 6 s of 2 s sessions; none was closed for it.
    assert logins is not None and connections is not None and logins >= connections + 2, (logins, connections)
    assert "session expired" not in broker.log_text(), broker.log_tail(20)
    records = confluent_consume(broker.bootstrap, "sasl-reauth", [0], sent, **settings)
    assert len(records) == sent


def test_kafka_python_produces_and_consumes_with_scram_sha_512(broker):
    from kafka import KafkaProducer

    settings = kafka_python_settings("alice", "alice-secret")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, **settings)
    values = [f"kp{i}".encode() for i in range(200)]
    for value in values:
        producer.send("sasl-kafka-python", value, partition=0)
    producer.flush(30)
    producer.close()
    records = kafka_python_consume(broker.bootstrap, "sasl-kafka-python", [0], len(values), **settings)
    assert [r.value for r in records] == values


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "x")])
def test_kafka_python_raises_its_authentication_error(broker, user, password, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError, SaslAuthenticationFailedError

    # kafka-python 3 retries the bootstrap after SaslAuthenticationFailedError until max.block.ms, then gives up.
    with pytest.raises((SaslAuthenticationFailedError, KafkaTimeoutError)):
        KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=4000, **kafka_python_settings(user, password))
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "Authentication failed during authentication due to invalid credentials" in caplog.text


def test_aiokafka_produces_and_consumes_with_scram_sha_512(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    settings = kafka_python_settings("alice", "alice-secret")
    values = [f"aio{i}".encode() for i in range(100)]

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **settings)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait("sasl-aiokafka", value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, **settings)
        await consumer.start()
        got: list[bytes] = []
        try:
            partition = TopicPartition("sasl-aiokafka", 0)
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


def test_aiokafka_with_a_wrong_password_is_refused(broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000,
                                    **kafka_python_settings("alice", "wrong"))
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaError):
        asyncio.run(run())


def test_confluent_kafkas_admin_client_manages_scram_credentials(broker):
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **librdkafka_settings("alice", "alice-secret")})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"carol-secret")])
    futures["carol"].result(timeout=20)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=20)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    confluent_produce(broker.bootstrap, "sasl-carol", [b"from carol"],
                      **librdkafka_settings("carol", "carol-secret", "SCRAM-SHA-256"))
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)
    admin.alter_user_scram_credentials([deletion])["carol"].result(timeout=20)
    with pytest.raises(Exception, match="(?i)not exist|RESOURCE_NOT_FOUND"):
        admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=20)
