"""kcat, confluent-kafka, kafka-python and aiokafka over the broker's SSL listener: produce and consume with and
without a client certificate, and the refusals each client reports for an untrusted, expired or misnamed broker
certificate and for a client certificate the broker does not accept."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.polling import wait_until
from tests.support.clients import (
    aiokafka_round_trip,
    confluent_consume,
    create_topic,
    kafka_python_round_trip,
    run_kcat,
)
from tests.support.tls import (
    TestPki,
    aiokafka_settings,
    kafka_python_settings,
    kcat_args,
    librdkafka_settings,
    start_ssl_broker,
)

MESSAGES = [f"tls message {i}".encode() * (1 + i % 7) for i in range(300)]
CLIENT_AUTH = ["none", "required"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> TestPki:
    return TestPki.create(tmp_path_factory.mktemp("pki"))


def client_cert(pki: TestPki, client_auth: str):
    return pki.client if client_auth == "required" else None


@pytest.mark.parametrize("client_auth", CLIENT_AUTH)
def test_kcat_produces_and_consumes_over_ssl(broker_factory, pki, client_auth):
    broker = start_ssl_broker(broker_factory, pki, client_auth=client_auth)
    create_topic(broker.bootstrap, "kcat-tls", 2)
    security = kcat_args(librdkafka_settings(pki, client_cert(pki, client_auth)))
    run_kcat(["-b", broker.ssl_bootstrap, *security, "-P", "-t", "kcat-tls"], input_bytes=b"\n".join(MESSAGES) + b"\n")
    output = run_kcat(["-b", broker.ssl_bootstrap, *security, "-C", "-t", "kcat-tls", "-o", "beginning", "-e", "-q"])
    assert sorted(output.splitlines()) == sorted(MESSAGES)
    listing = run_kcat(["-b", broker.ssl_bootstrap, *security, "-L"]).decode()
    assert f"at 127.0.0.1:{broker.ssl_port}" in listing


@pytest.mark.parametrize("client_auth", CLIENT_AUTH)
def test_confluent_kafka_produces_and_consumes_over_ssl(broker_factory, pki, client_auth):
    from confluent_kafka import Producer

    broker = start_ssl_broker(broker_factory, pki, client_auth=client_auth)
    settings = librdkafka_settings(pki, client_cert(pki, client_auth))
    producer = Producer({"bootstrap.servers": broker.ssl_bootstrap, "acks": "all", **settings})
    failures: list = []
    for value in MESSAGES:
        producer.produce("confluent-tls", value, partition=0,
                         on_delivery=lambda error, message: error is not None and failures.append(error))
    assert producer.flush(30) == 0
    assert failures == []
    records = confluent_consume(broker.ssl_bootstrap, "confluent-tls", [0], len(MESSAGES), **settings)
    assert [r.value for r in records] == MESSAGES


@pytest.mark.parametrize("client_auth", CLIENT_AUTH)
def test_kafka_python_produces_and_consumes_over_ssl(broker_factory, pki, client_auth):
    broker = start_ssl_broker(broker_factory, pki, client_auth=client_auth)
    settings = kafka_python_settings(pki, client_cert(pki, client_auth))
    create_topic(broker.bootstrap, "kafka-python-tls", 1)
    assert kafka_python_round_trip(broker.ssl_bootstrap, "kafka-python-tls", MESSAGES, **settings) == MESSAGES


@pytest.mark.parametrize("client_auth", CLIENT_AUTH)
def test_aiokafka_produces_and_consumes_over_ssl(broker_factory, pki, client_auth):
    broker = start_ssl_broker(broker_factory, pki, client_auth=client_auth)
    create_topic(broker.bootstrap, "aiokafka-tls", 1)
    received = aiokafka_round_trip(broker.ssl_bootstrap, "aiokafka-tls", MESSAGES,
                                   lambda: aiokafka_settings(pki, client_cert(pki, client_auth)))
    assert received == MESSAGES


# -- refusals ------------------------------------------------------------------------------------

# What each broker certificate problem is, as OpenSSL's verification names it in the Python clients' errors.
BROKER_PROBLEMS = {
    "untrusted": ("untrusted_broker", "self-signed certificate in certificate chain"),
    "expired": ("expired_broker", "certificate has expired"),
    "hostname": ("misnamed_broker", "mismatch"),
}


@pytest.fixture(scope="module", params=sorted(BROKER_PROBLEMS))
def refused(request, tmp_path_factory, pki):
    """A broker presenting a certificate its clients must refuse, and the words of their refusal."""
    from tests.support.broker import BrokerProcess
    from tests.support.ports import free_port
    from tests.support.process import stop_all
    from tests.support.tls import ssl_listener_overrides

    attribute, words = BROKER_PROBLEMS[request.param]
    home = tmp_path_factory.mktemp(f"refused-{request.param}")
    port, ssl_port = free_port(), free_port()
    broker = BrokerProcess(home / "logs", port=port, log_path=home / "broker.log",
                           overrides=ssl_listener_overrides(pki, port, ssl_port, keystore=getattr(pki, attribute)))
    broker.start()
    try:
        yield f"127.0.0.1:{ssl_port}", words
    finally:
        stop_all([broker])


def test_kcat_refuses_a_bad_broker_certificate(pki, refused):
    bootstrap, words = refused
    with pytest.raises(AssertionError) as failure:
        run_kcat(["-b", bootstrap, *kcat_args(librdkafka_settings(pki)), "-L", "-m", "5"], timeout=30)
    # librdkafka names the failure, not OpenSSL's reason for it.
    assert "SSL handshake failed" in str(failure.value) and "certificate verify failed" in str(failure.value)


def confluent_errors(bootstrap: str, settings: dict, timeout: float = 10.0) -> list:
    """The errors a confluent-kafka producer reports (error_cb) while it tries to reach ``bootstrap``."""
    from confluent_kafka import Producer

    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append, **settings})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors


def test_confluent_kafka_refuses_a_bad_broker_certificate(pki, refused):
    from confluent_kafka import KafkaError

    bootstrap, words = refused
    errors = confluent_errors(bootstrap, librdkafka_settings(pki))
    # librdkafka names the failed verification _SSL or, when the broker's alert races its own, _TRANSPORT; the
    # reason is what matters.
    assert errors and errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT), errors
    assert "certificate verify failed" in errors[0].str(), errors


def test_kafka_python_refuses_a_bad_broker_certificate(pki, refused, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    bootstrap, words = refused
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000, bootstrap_timeout_ms=5000,
                      **kafka_python_settings(pki))
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text and words in caplog.text


def test_aiokafka_refuses_a_bad_broker_certificate(pki, refused):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    bootstrap, words = refused

    async def attempt() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000, **aiokafka_settings(pki))
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(attempt())


@pytest.mark.parametrize("certificate", ["untrusted_client", "expired_client", None])
def test_broker_requiring_client_certificates_refuses_bad_ones(broker_factory, pki, certificate):
    from confluent_kafka import KafkaError

    broker = start_ssl_broker(broker_factory, pki, client_auth="required")
    cert = getattr(pki, certificate) if certificate else None
    errors = confluent_errors(broker.ssl_bootstrap, librdkafka_settings(pki, cert))
    assert errors and errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT), errors
    wait_until(lambda: "TLS handshake with" in broker.log_text(), 10, message="the broker logging the refusal")
    assert "CERTIFICATE" in broker.log_text().split("TLS handshake with", 1)[1].splitlines()[0].upper()
