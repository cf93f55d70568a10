"""SASL on a ZooKeeper cluster whose only listener is SASL_PLAINTEXT: users created in ZooKeeper (the users CLI with
--zookeeper) or through any broker reach every broker through the change notifications at once; followers log in
with the brokers' own credential and replicate; a broker whose inter-broker password is wrong cannot fetch."""

from __future__ import annotations

import pytest

from pipeline.cli import main as cli_main
from pipeline.client.admin import AdminClient
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import AuthenticationError
from pipeline.security.client_settings import ClientSecurity
from tests.support.broker import BrokerProcess
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.process import stop_all

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{}";'


def security(user: str, password: str) -> ClientSecurity:
    return ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", username=user, password=password)


def logs_in(broker: BrokerProcess, user: str, password: str) -> bool:
    connection = BrokerConnection(broker.host, broker.port, security=security(user, password), timeout_s=5)
    try:
        connection.connect()
    except AuthenticationError:
        return False
    connection.close()
    return True


@pytest.fixture
def cluster(tmp_path, zk_connect):
    brokers: list[BrokerProcess] = []

    def start(broker_id: int, password: str = "broker-secret") -> BrokerProcess:
        port = free_port()
        broker = BrokerProcess(tmp_path / f"broker{broker_id}" / "logs", port=port,
                               log_path=tmp_path / f"broker{broker_id}" / "broker.log", overrides={
                                   "zookeeper.connect": zk_connect, "broker.id": broker_id,
                                   "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                                   "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": JAAS.format(password),
                                   "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 2000})
        brokers.append(broker)
        return broker.start()
    assert cli_main(["users", "--zookeeper", zk_connect, "--alter", "--entity-type", "users", "--entity-name",
                     "broker", "--add-config", "SCRAM-SHA-512=[password=broker-secret]"]) == 0
    assert cli_main(["users", "--zookeeper", zk_connect, "--alter", "--entity-name", "admin",
                     "--add-config", "SCRAM-SHA-512=[password=admin-secret]"]) == 0
    yield start
    stop_all(brokers)


def isr(admin: AdminClient, topic: str) -> set[int]:
    return set(admin.describe_topics([topic])[0].partitions[0].isr)


def test_users_reach_every_broker_at_once_and_followers_replicate(cluster, zk_connect):
    first, second = cluster(1), cluster(2)
    assert cli_main(["users", "--zookeeper", zk_connect, "--alter", "--entity-name", "alice",
                     "--add-config", "SCRAM-SHA-512=[password=alice-secret]"]) == 0
    wait_until(lambda: logs_in(first, "alice", "alice-secret") and logs_in(second, "alice", "alice-secret"), 10,
               message="alice known to both brokers")
    with AdminClient(first.bootstrap, security=security("admin", "admin-secret")) as admin:
        admin.alter_user_scram_credentials({"carol": {"SCRAM-SHA-512": ("carol-secret", 4096)}})
        wait_until(lambda: logs_in(second, "carol", "carol-secret"), 10, message="carol known to broker 2")
        admin.create_topics("replicated", 1, 2)
        wait_until(lambda: isr(admin, "replicated") == {1, 2}, 30, message="both replicas in sync")
        admin.alter_user_scram_credentials(deletions={"carol": ["SCRAM-SHA-512"]})
        wait_until(lambda: not logs_in(second, "carol", "carol-secret"), 10, message="carol gone from broker 2")
    assert cli_main(["users", "--zookeeper", zk_connect, "--describe", "--entity-name", "alice"]) == 0


def test_a_broker_with_a_wrong_inter_broker_password_cannot_replicate(cluster):
    good, bad = cluster(1), cluster(2, password="not-the-password")
    with AdminClient(good.bootstrap, security=security("admin", "admin-secret")) as admin:
        admin.create_topics("replicated", 2, 2)
        wait_until(lambda: "failed authentication" in good.log_text(), 20, message="the follower's login refused")
        # The leader drops the follower that never fetches from the ISR (replica.lag.time.max.ms).
        wait_until(lambda: all(2 not in p.isr for p in admin.describe_topics(["replicated"])[0].partitions
                               if p.leader == 1), 20, message="broker 2 out of the ISR of broker 1's partitions")
    assert "refused the SASL login of 'broker'" in bad.log_text()
