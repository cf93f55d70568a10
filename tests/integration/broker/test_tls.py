"""The broker's listeners and TLS, end to end on broker processes: several listeners at once, each answering Metadata
and FindCoordinator with its own endpoints; our BrokerConnection over SSL (client certificates, and the errors of a
bad broker certificate); handshakes that never come or are garbage; and a three-broker cluster whose brokers
replicate and elect over an SSL inter-broker listener that requires client certificates."""

from __future__ import annotations

import socket
import time

import pytest

from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import KafkaConnectionError
from pipeline.protocol.api_keys import ApiKey
from pipeline.security.client_settings import ClientSecurity
from pipeline.zk import layout
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.tls import TestPki, librdkafka_settings, ssl_listener_overrides, start_ssl_broker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> TestPki:
    return TestPki.create(tmp_path_factory.mktemp("pki"))


def ssl_security(pki: TestPki, cert=None, ca_file: str | None = None) -> ClientSecurity:
    return ClientSecurity(protocol="SSL", ca_file=ca_file or pki.ca_file, cert_file=str(cert.cert) if cert else "",
                          key_file=str(cert.key) if cert else "")


def metadata_brokers(connection: BrokerConnection) -> dict[int, tuple[str, int]]:
    body = connection.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
    return {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}


def metadata_brokers_over_ssl(cluster, pki: TestPki) -> dict[int, tuple[str, int]]:
    with BrokerConnection("127.0.0.1", cluster.brokers[1].ssl_port, security=ssl_security(pki, pki.client)) as tls:
        return metadata_brokers(tls)


def coordinator(connection: BrokerConnection) -> tuple[str, int]:
    body = connection.request(ApiKey.FIND_COORDINATOR, {"key": "tls-group", "key_type": 0})
    return body["host"], body["port"]


def test_each_listener_answers_with_its_own_endpoints(broker_factory, pki):
    broker = start_ssl_broker(broker_factory, pki)
    with BrokerConnection("127.0.0.1", broker.port) as plain:
        assert metadata_brokers(plain) == {0: ("127.0.0.1", broker.port)}
        assert coordinator(plain) == ("127.0.0.1", broker.port)
    with BrokerConnection("127.0.0.1", broker.ssl_port, security=ssl_security(pki)) as tls:
        assert metadata_brokers(tls) == {0: ("127.0.0.1", broker.ssl_port)}
        assert coordinator(tls) == ("127.0.0.1", broker.ssl_port)


def test_advertised_listeners_and_custom_listener_names(broker_factory, pki):
    port, internal = free_port(), free_port()
    broker = broker_factory(port=port, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}",
        "listener.security.protocol.map": "INTERNAL:SSL",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://localhost:{internal}",
        "ssl.keystore.location": str(pki.broker.bundle)})
    with BrokerConnection("localhost", internal, security=ssl_security(pki)) as tls:
        assert metadata_brokers(tls) == {0: ("localhost", internal)}
    assert f"INTERNAL://127.0.0.1:{internal}" in broker.log_text()


def test_client_certificate_required(broker_factory, pki):
    broker = start_ssl_broker(broker_factory, pki, client_auth="required")
    with BrokerConnection("127.0.0.1", broker.ssl_port, security=ssl_security(pki, pki.client)) as tls:
        assert metadata_brokers(tls) == {0: ("127.0.0.1", broker.ssl_port)}
    # TLS 1.3: the refusal of a missing certificate arrives after the client's side of the handshake is done,
    # at its first read.
    with pytest.raises(KafkaConnectionError, match="the broker refused this client's certificate, or its absence"):
        BrokerConnection("127.0.0.1", broker.ssl_port, security=ssl_security(pki), timeout_s=10).connect()
    with pytest.raises(KafkaConnectionError, match="the broker refused this client's certificate"):
        BrokerConnection("127.0.0.1", broker.ssl_port, security=ssl_security(pki, pki.expired_client),
                         timeout_s=10).connect()


@pytest.mark.parametrize("keystore,words", [
    ("untrusted_broker", "self-signed certificate in certificate chain"),
    ("expired_broker", "certificate has expired"),
    ("misnamed_broker", "IP address mismatch"),
])
def test_our_client_refuses_a_bad_broker_certificate(broker_factory, pki, keystore, words):
    broker = start_ssl_broker(broker_factory, pki, keystore=getattr(pki, keystore))
    with pytest.raises(KafkaConnectionError) as refused:
        BrokerConnection("127.0.0.1", broker.ssl_port, security=ssl_security(pki), timeout_s=10).connect()
    assert f"TLS handshake with broker 127.0.0.1:{broker.ssl_port} failed" in str(refused.value)
    assert words in str(refused.value)


def test_a_client_that_never_handshakes_is_closed_and_others_are_served(broker_factory, pki):
    broker = start_ssl_broker(broker_factory, pki, overrides={"socket.request.read.timeout.ms": 1000})
    silent = socket.create_connection(("127.0.0.1", broker.ssl_port))
    garbage = socket.create_connection(("127.0.0.1", broker.ssl_port))
    try:
        garbage.sendall(b"\x00\x00\x00\x10GET / HTTP/1.0\r\n\r\n" * 4)
        garbage.settimeout(10)
        assert garbage.recv(4096) is not None  # an alert or the end of the stream; either way it is closed next
        started = time.monotonic()
        silent.settimeout(15)
        assert silent.recv(100) == b""
        assert time.monotonic() - started < 10
        with BrokerConnection("127.0.0.1", broker.ssl_port, security=ssl_security(pki)) as tls:
            assert metadata_brokers(tls)
    finally:
        silent.close()
        garbage.close()
    log = broker.log_text()
    assert "no TLS handshake within 1000 ms" in log
    assert "TLS handshake with" in log


def test_cluster_replicates_and_elects_over_an_ssl_inter_broker_listener(broker_cluster_factory, zk_connect, pki):
    from confluent_kafka import Producer

    from tests.support.clients import confluent_consume

    cluster = broker_cluster_factory(zk_connect, size=3, start=False, overrides={
        "zookeeper.session.timeout.ms": 4000, "replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
        "min.insync.replicas": 2, "default.replication.factor": 3, "auto.leader.rebalance.enable": False,
        "controlled.shutdown.enable": False})
    for broker in cluster.brokers.values():
        broker.ssl_port = free_port()
        broker.overrides.update({key: str(value) for key, value in ssl_listener_overrides(
            pki, broker.port, broker.ssl_port, client_auth="required", inter_broker="SSL").items()})
    cluster.start()
    registration = layout.decode(cluster.zk.get(layout.broker_path(1))[0])
    ssl_port = cluster.brokers[1].ssl_port
    assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{cluster.brokers[1].port}",
                                         f"SSL://127.0.0.1:{ssl_port}"]
    assert registration["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert (registration["host"], registration["port"]) == ("127.0.0.1", ssl_port)

    # Every broker is named at its SSL endpoint to a client of an SSL listener, and at its PLAINTEXT one otherwise.
    ssl_ports = {i: ("127.0.0.1", b.ssl_port) for i, b in cluster.brokers.items()}
    wait_until(lambda: metadata_brokers_over_ssl(cluster, pki) == ssl_ports, 30, message="every broker in Metadata")
    with BrokerConnection("127.0.0.1", ssl_port, security=ssl_security(pki, pki.client)) as tls:
        assert coordinator(tls) in ssl_ports.values()
    with BrokerConnection("127.0.0.1", cluster.brokers[1].port) as plain:
        assert metadata_brokers(plain) == {i: ("127.0.0.1", b.port) for i, b in cluster.brokers.items()}
        assert coordinator(plain) in {("127.0.0.1", b.port) for b in cluster.brokers.values()}

    bootstrap = ",".join(f"127.0.0.1:{b.ssl_port}" for b in cluster.brokers.values())
    settings = librdkafka_settings(pki, pki.client)
    values = [f"replicated over TLS {i}".encode() for i in range(200)]

    def produce(bootstrap: str, batch: list[bytes]) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000, **settings})
        failures: list = []
        for value in batch:
            producer.produce("tls-replicated", value, partition=0,
                             on_delivery=lambda error, message: error is not None and failures.append(error))
        assert producer.flush(60) == 0 and failures == []

    produce(bootstrap, values[:100])
    state = wait_until(lambda: (s := cluster.partition_state("tls-replicated", 0)) and len(s["isr"]) == 3 and s,
                       30, message="every replica in sync over the SSL inter-broker listener")
    leader = state["leader"]
    cluster.brokers[leader].kill()
    wait_until(lambda: cluster.partition_state("tls-replicated", 0)["leader"] not in (leader, -1), 30,
               message="a new leader after the old one was killed")
    live_bootstrap = ",".join(f"127.0.0.1:{b.ssl_port}" for i, b in cluster.brokers.items() if i != leader)
    produce(live_bootstrap, values[100:])
    records = confluent_consume(live_bootstrap, "tls-replicated", [0], len(values), **settings)
    assert [r.value for r in records] == values


def test_our_producer_and_consumer_over_ssl_with_a_client_certificate(broker_factory, pki):
    from pipeline.client.consumer import Consumer
    from pipeline.client.producer import Producer, ProducerData
    from tests.support.clients import create_topic

    broker = start_ssl_broker(broker_factory, pki, client_auth="required")
    create_topic(broker.bootstrap, "ours-over-tls", 2)
    security = {"security.protocol": "SSL", "ssl.ca.location": pki.ca_file,
                "ssl.certificate.location": str(pki.client.cert), "ssl.key.location": str(pki.client.key)}
    sent = {f"key-{i}".encode(): f"value {i}".encode() for i in range(500)}
    with Producer({"metadata.broker.list": broker.ssl_bootstrap, "request.required.acks": -1, **security}) as producer:
        for key, value in sent.items():
            producer.send(ProducerData("ours-over-tls", key, [value]))
    received = {}
    with Consumer({"metadata.broker.list": broker.ssl_bootstrap, "auto.offset.reset": "smallest",
                   "consumer.timeout.ms": 5000, **security}, topics=["ours-over-tls"]) as consumer:
        for message in consumer:
            received[message.key] = message.value
            if len(received) == len(sent):
                break
    assert received == sent
