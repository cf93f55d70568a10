"""confluent-kafka's transactional producer logged in (SCRAM-SHA-512) against a broker with the authorizer on: alice,
with WRITE and DESCRIBE on her transactional id, WRITE on one topic and READ on one group, commits a transaction
with its offsets; the topic she may not write and the group she may not read make her transaction abortable
(TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED), after which she aborts and goes on; bob, without WRITE on
her transactional id, cannot even initialise it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and without DESCRIBE on it
neither lists nor describes it."""

from __future__ import annotations

from typing import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from pipeline.client.admin import AdminClient
from pipeline.client.connection import BrokerConnection
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode
from pipeline.security.acl import AclOperation, ResourceType
from pipeline.security.client_settings import ClientSecurity
from tests.support import BrokerProcess
from tests.support.acls import AUTHORIZER, acl, seed_log_dir
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.sasl import librdkafka_settings, seed_users

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TOPIC, OTHER_TOPIC = "txn-acl", "txn-acl-other"
W, R, D = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    home = tmp_path_factory.mktemp("txn-acl")
    port = free_port("127.0.0.1")
    seed_users(home / "logs", USERS)
    seed_log_dir(home / "logs", acl(ResourceType.TRANSACTIONAL_ID, "alice-tx", W, D, principal="User:alice")
                 + acl(ResourceType.TOPIC, TOPIC, W, R, D, principal="User:alice")
                 + acl(ResourceType.TOPIC, TOPIC, W, D, principal="User:bob")
                 + acl(ResourceType.GROUP, "alice-group", R, principal="User:alice"))
    overrides = {**AUTHORIZER, "super.users": "User:admin", "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"}
    with BrokerProcess(home / "logs", port=port, overrides=overrides, log_path=home / "broker.log") as broker:
        admin_login = ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", username="admin",
                                     password=USERS["admin"])
        with AdminClient(broker.bootstrap, security=admin_login) as admin:
            admin.create_topics([TOPIC, OTHER_TOPIC], 1, 1)
        yield broker


def producer(broker: BrokerProcess, user: str, transactional_id: str) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                     **librdkafka_settings(user, USERS[user])})


def raised(action) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        action()
    return caught.value.args[0]


def test_the_transactional_id_topics_and_group_are_each_authorized(secured):
    alice = producer(secured, "alice", "alice-tx")
    alice.init_transactions(30)
    alice.begin_transaction()
    alice.produce(TOPIC, b"kept")
    alice.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)],
                                      _group_metadata(secured, "alice-group"), 30)
    alice.commit_transaction(30)
    # Until its markers are written the commit is PrepareCommit, and an abort then (of a transaction whose only
    # request was refused before reaching the coordinator) is INVALID_TXN_STATE, as Kafka answers it.
    wait_until(lambda: _state(secured, "alice-tx") == "CompleteCommit", 10, message="the commit completed")

    alice.begin_transaction()
    delivered: list[KafkaError | None] = []
    try:
        alice.produce(OTHER_TOPIC, b"refused", on_delivery=lambda err, msg: delivered.append(err))
    except KafkaException as exc:  # the client already knew the topic is not hers
        refused = exc.args[0].code()
    else:
        error = raised(lambda: alice.commit_transaction(30))
        assert error.txn_requires_abort() and not error.fatal(), error
        alice.poll(0)
        refused = delivered[0].code()
    assert refused == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice.abort_transaction(30)

    alice.begin_transaction()
    alice.produce(TOPIC, b"with a foreign group")
    error = raised(lambda: alice.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)],
                                                             _group_metadata(secured, "bob-group"), 30))
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    alice.abort_transaction(30)

    bob = producer(secured, "bob", "alice-tx")
    error = raised(lambda: bob.init_transactions(30))
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error

    # ListTransactions leaves out the ids a principal may not describe; DescribeTransactions refuses them.
    listing = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
    assert [t["transactional_id"] for t in _ask(secured, "alice", ApiKey.LIST_TRANSACTIONS, listing, 1)[
        "transaction_states"]] == ["alice-tx"]
    assert _ask(secured, "bob", ApiKey.LIST_TRANSACTIONS, listing, 1)["transaction_states"] == []
    [described] = _ask(secured, "bob", ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["alice-tx"]}, 0)[
        "transaction_states"]
    assert described["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _ask(broker: BrokerProcess, user: str, api_key: int, body: dict, version: int) -> dict:
    login = ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", username=user,
                           password=USERS[user])
    with BrokerConnection(broker.host, broker.port, security=login) as connection:
        connection.connect()
        return connection.request(api_key, body, version=version)


def _state(broker: BrokerProcess, transactional_id: str) -> str:
    answer = _ask(broker, "admin", ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]}, 0)
    return answer["transaction_states"][0]["transaction_state"]


def _group_metadata(broker: BrokerProcess, group: str):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         **librdkafka_settings("alice", USERS["alice"])})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()
