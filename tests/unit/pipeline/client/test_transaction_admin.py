"""The AdminClient's transaction calls against scripted broker answers."""

from __future__ import annotations

import pytest

from pipeline.client.transaction_admin import TransactionCalls, TransactionDescription, TransactionListing
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from tests.unit.pipeline.client.test_group_admin import ScriptedAdmin, coordinator, sent_to


class TxAdmin(ScriptedAdmin, TransactionCalls):
    pass


def listing(node_id: int, body: dict) -> dict:
    states = {1: [("a", 10, "Ongoing"), ("c", 12, "Empty")], 2: [("b", 11, "CompleteCommit")]}[node_id]
    return {"error_code": 0, "unknown_state_filters": [], "transaction_states": [
        {"transactional_id": t, "producer_id": p, "transaction_state": s} for t, p, s in states]}


def test_list_transactions_merges_every_broker_and_sends_the_filters() -> None:
    admin = TxAdmin({ApiKey.LIST_TRANSACTIONS: [listing]})
    found = admin.list_transactions(["Ongoing"], [10], 5000)
    assert found == [TransactionListing("a", 1, 10, "Ongoing"), TransactionListing("b", 2, 11, "CompleteCommit"),
                     TransactionListing("c", 1, 12, "Empty")]
    assert sorted(sent_to(admin, ApiKey.LIST_TRANSACTIONS)) == [1, 2]
    body = admin.sent[0][2]
    assert body == {"state_filters": ["Ongoing"], "producer_id_filters": [10], "duration_filter": 5000}


def describe_answer(code: int = 0):
    def answer(node_id: int, body: dict) -> dict:
        (tid,) = body["transactional_ids"]
        return {"transaction_states": [{
            "error_code": code, "transactional_id": tid, "transaction_state": "Ongoing",
            "transaction_timeout_ms": 60000, "transaction_start_time_ms": 1000, "producer_id": 5, "producer_epoch": 3,
            "topics": [{"topic": "out", "partitions": [1, 0]}, {"topic": "__consumer_offsets", "partitions": [7]}]}]}
    return answer


def test_describe_asks_each_ids_transaction_coordinator_again_after_a_coordinator_error() -> None:
    admin = TxAdmin({ApiKey.FIND_COORDINATOR: [coordinator(2)],
                     ApiKey.DESCRIBE_TRANSACTIONS: [describe_answer(ErrorCode.NOT_COORDINATOR), describe_answer()]})
    (described,) = admin.describe_transactions("tx-1")
    assert described == TransactionDescription(2, "tx-1", 5, 3, "Ongoing", 60000, 1000,
                                               (("__consumer_offsets", 7), ("out", 0), ("out", 1)))
    finds = [body for _, key, body in admin.sent if key == ApiKey.FIND_COORDINATOR]
    assert len(finds) == 2 and all(b == {"key": "tx-1", "key_type": 1} for b in finds)
    assert sent_to(admin, ApiKey.DESCRIBE_TRANSACTIONS) == [2, 2]


def test_describe_of_an_unknown_id_raises() -> None:
    admin = TxAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1)],
                     ApiKey.DESCRIBE_TRANSACTIONS: [describe_answer(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)]})
    with pytest.raises(KafkaProtocolError) as raised:
        admin.describe_transactions(["nope"])
    assert raised.value.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
