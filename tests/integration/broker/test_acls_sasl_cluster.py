"""The authorizer on a ZooKeeper cluster whose only listener is SASL_PLAINTEXT: the brokers log in to each other
as User:broker, a super user, so followers replicate; users get what their ACLs (written to ZooKeeper before the
brokers start, as the deployment does) give them, on every broker."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from pipeline.cli import main as cli_main
from pipeline.client.admin import AdminClient
from pipeline.security.acl import AclOperation, PatternType, ResourceType
from pipeline.security.client_settings import ClientSecurity
from pipeline.zk.client import connect
from tests.support.acls import AUTHORIZER, acl, seed_zookeeper
from tests.support.broker import BrokerProcess
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.process import stop_all
from tests.support.sasl import kafka_python_settings

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";'
PASSWORDS = {"broker": "broker-secret", "admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture
def brokers(tmp_path, zk_connect):
    for user, password in PASSWORDS.items():
        assert cli_main(["users", "--zookeeper", zk_connect, "--alter", "--entity-name", user,
                         "--add-config", f"SCRAM-SHA-512=[password={password}]"]) == 0
    zk = connect(zk_connect)
    try:
        seed_zookeeper(zk, acl(ResourceType.TOPIC, "alice-", AclOperation.WRITE, principal="User:alice",
                               pattern=PatternType.PREFIXED))
    finally:
        zk.stop()
        zk.close()
    started: list[BrokerProcess] = []
    for broker_id in (1, 2):
        port = free_port()
        broker = BrokerProcess(tmp_path / f"broker{broker_id}" / "logs", port=port,
                               log_path=tmp_path / f"broker{broker_id}" / "broker.log", overrides={
                                   **AUTHORIZER, "super.users": "User:broker;User:admin",
                                   "zookeeper.connect": zk_connect, "broker.id": broker_id,
                                   "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                                   "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": JAAS,
                                   "replica.fetch.backoff.ms": 200})
        started.append(broker)
    try:
        yield [b.start() for b in started]
    finally:
        stop_all(started)


def produce(bootstrap: str, topic: str, user: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0, max_block_ms=15000, acks="all",
                             **kafka_python_settings(user, PASSWORDS[user]))
    try:
        producer.send(topic, b"v").get(timeout=30)
    finally:
        producer.close(timeout=5)


def test_brokers_replicate_as_super_users_and_users_get_their_acls(brokers):
    admin_login = ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", username="admin",
                                 password=PASSWORDS["admin"])
    bootstrap = ",".join(b.bootstrap for b in brokers)
    with AdminClient(bootstrap, security=admin_login) as admin:
        admin.create_topics(["alice-events", "other-events"], 2, 2)
        wait_until(lambda: all(set(p.isr) == {1, 2} for t in admin.describe_topics(["alice-events", "other-events"])
                               for p in t.partitions), 30, message="followers (User:broker) in sync")
    produce(bootstrap, "alice-events", "alice")  # acks=all: both replicas took it
    with pytest.raises(TopicAuthorizationFailedError):
        produce(bootstrap, "other-events", "alice")
