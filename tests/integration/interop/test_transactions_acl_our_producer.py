"""Our transactional producer against a broker with the authorizer on (the same broker and ACLs as
test_transactions_acl's confluent-kafka test): alice commits a transaction with its offsets; a topic she may not
write and a group she may not read make her transaction abortable (she aborts and goes on); bob, without WRITE on
her transactional id, gets a fatal error from init_transactions."""

from __future__ import annotations

import pytest

from pipeline.client.errors import TransactionAbortableError, TransactionFatalError
from pipeline.client.producer import ProduceError, Producer, ProducerData
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from tests.integration.interop.test_transactions_acl import (  # noqa: F401 (secured is a fixture)
    OTHER_TOPIC,
    TOPIC,
    USERS,
    _state,
    secured,
)
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

TIMEOUT = 30.0


def producer(broker, user: str, transactional_id: str) -> Producer:
    return Producer({"metadata.broker.list": broker.bootstrap, "transactional.id": transactional_id,
                     "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.username": user, "sasl.password": USERS[user]})


def test_our_producer_meets_each_authorization(secured):
    with producer(secured, "alice", "alice-ours") as alice:
        with pytest.raises(TransactionFatalError) as caught:
            alice.init_transactions(TIMEOUT)  # no ACL on this transactional id
        assert caught.value.cause.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    with producer(secured, "alice", "alice-tx") as alice:
        alice.init_transactions(TIMEOUT)
        alice.begin_transaction()
        alice.send(ProducerData(TOPIC, None, [b"ours-kept"], partition=0))
        alice.send_offsets_to_transaction({(TOPIC, 0): 1}, "alice-group", None, TIMEOUT)
        alice.commit_transaction(TIMEOUT)
        wait_until(lambda: _state(secured, "alice-tx") == "CompleteCommit", 10, message="the commit completed")

        alice.begin_transaction()
        # The topic's metadata already says it is not hers (before AddPartitionsToTxn could): the send fails and
        # the transaction can only abort.
        with pytest.raises((ProduceError, KafkaProtocolError)) as refused:
            alice.send(ProducerData(OTHER_TOPIC, None, [b"refused"], partition=0))
        error = refused.value
        if isinstance(error, ProduceError):
            error = error.failures[0][1].cause
        assert error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(TransactionAbortableError):
            alice.commit_transaction(TIMEOUT)
        alice.abort_transaction(TIMEOUT)

        alice.begin_transaction()
        alice.send(ProducerData(TOPIC, None, [b"with a foreign group"], partition=0))
        with pytest.raises(TransactionAbortableError) as foreign:
            alice.send_offsets_to_transaction({(TOPIC, 0): 1}, "bob-group", None, TIMEOUT)
        assert foreign.value.cause.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        alice.abort_transaction(TIMEOUT)

        alice.begin_transaction()
        alice.send(ProducerData(TOPIC, None, [b"ours-after"], partition=0))
        alice.commit_transaction(TIMEOUT)

    with producer(secured, "bob", "alice-tx") as bob:
        with pytest.raises(TransactionFatalError) as caught:
            bob.init_transactions(TIMEOUT)
        assert caught.value.cause.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
