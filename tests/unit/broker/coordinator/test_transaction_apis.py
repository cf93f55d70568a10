"""TransactionApis over a TransactionCoordinator on a FileTransactionStore: the ACLs each API checks and Kafka's
error codes for refusals (refused requests never reach the coordinator), PRODUCER_FENCED only for versions that
know it, FindCoordinator by key type, and ListTransactions' filters."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from broker.coordinator.transaction_apis import TransactionApis
from broker.coordinator.transaction_coordinator import TransactionConfig, TransactionCoordinator
from broker.coordinator.transaction_store import FileTransactionStore
from broker.metadata import BrokerEndpoint
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import RequestHeader
from pipeline.protocol.errors import ErrorCode
from pipeline.security.acl import AclOperation, ResourceType
from tests.unit.broker.coordinator.test_transaction_coordinator import Clock, Counter, RecordingMarkers

E = ErrorCode
WRITE, READ, DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE
TXN, TOPIC, GROUP = ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC, ResourceType.GROUP


def header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(api_key, version, 1, "test", 0)


class Api:
    """The handlers, called one at a time on a loop of their own (closed by the fixture)."""

    def __init__(self, tmp_path, allowed=None) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.coordinator = TransactionCoordinator(FileTransactionStore(tmp_path), TransactionConfig(),
                                                  lambda t: True, Counter(), RecordingMarkers(), time_ms=self.clock)
        self.apis = TransactionApis(self.coordinator, lambda key: BrokerEndpoint(3, "10.0.0.3", 9093))
        self.allowed = allowed
        self.apis.request_check = lambda: self.check
        self.fallbacks: list[str] = []
        self.handlers = self.apis.handlers({
            ApiKey.FIND_COORDINATOR: lambda h, r: self.fallbacks.append("group") or {},
            ApiKey.INIT_PRODUCER_ID: lambda h, r: self.fallbacks.append("idempotent") or {}})

    def check(self, operation, resource_type, name="", count=True) -> bool:
        return self.allowed is None or (operation, resource_type, name) in self.allowed

    def __call__(self, api_key: int, version: int, request: dict) -> dict:
        result = self.handlers[api_key](header(api_key, version), request)
        return self.loop.run_until_complete(result) if inspect.isawaitable(result) else result


@pytest.fixture
def make_api():
    made: list[Api] = []

    def make(tmp_path, allowed=None) -> Api:
        made.append(Api(tmp_path, allowed))
        return made[-1]
    yield make
    for api in made:
        api.coordinator.store.close()
        api.loop.close()


def init(transactional_id: str = "t") -> dict:
    return {"transactional_id": transactional_id, "transaction_timeout_ms": 10000, "producer_id": -1,
            "producer_epoch": -1}


def add(topics: dict[str, list[int]], epoch: int = 0) -> dict:
    return {"transactional_id": "t", "producer_id": 1000, "producer_epoch": epoch,
            "topics": [{"name": n, "partitions": p} for n, p in topics.items()]}


def test_requests_without_a_transactional_id_or_for_groups_go_to_the_other_handlers(tmp_path, make_api) -> None:
    api = make_api(tmp_path)
    api(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 1})
    api(ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
    assert api.fallbacks == ["idempotent", "group"]
    assert api(ApiKey.FIND_COORDINATOR, 1, {"key": "t", "key_type": 1})[
        "node_id"] == 3
    assert api(ApiKey.FIND_COORDINATOR, 1, {"key": "", "key_type": 1})["error_code"] == E.INVALID_REQUEST


def test_producer_fenced_is_invalid_producer_epoch_for_older_versions(tmp_path, make_api) -> None:
    api = make_api(tmp_path)
    assert api(ApiKey.INIT_PRODUCER_ID, 4, init())["producer_epoch"] == 0
    assert api(ApiKey.INIT_PRODUCER_ID, 4, init())["producer_epoch"] == 1
    stale = add({"a": [0]}, epoch=0)
    [[partition]] = [t["results"] for t in api(ApiKey.ADD_PARTITIONS_TO_TXN, 1, stale)["results"]]
    assert partition == {"partition_index": 0, "partition_error_code": E.INVALID_PRODUCER_EPOCH}
    [[partition]] = [t["results"] for t in api(ApiKey.ADD_PARTITIONS_TO_TXN, 2, stale)["results"]]
    assert partition["partition_error_code"] == E.PRODUCER_FENCED
    end = {"transactional_id": "t", "producer_id": 1000, "producer_epoch": 0, "committed": True}
    assert api(ApiKey.END_TXN, 1, end)["error_code"] == E.INVALID_PRODUCER_EPOCH
    assert api(ApiKey.END_TXN, 2, end)["error_code"] == E.PRODUCER_FENCED
    kip_360 = {**init(), "producer_id": 1000, "producer_epoch": 7}
    assert api(ApiKey.INIT_PRODUCER_ID, 3, kip_360)["error_code"] == E.INVALID_PRODUCER_EPOCH
    assert api(ApiKey.INIT_PRODUCER_ID, 4, kip_360)["error_code"] == E.PRODUCER_FENCED
    assert api(ApiKey.INIT_PRODUCER_ID, 4, {**init(), "transaction_timeout_ms": 900001})["error_code"] == \
        E.INVALID_TRANSACTION_TIMEOUT


def test_each_api_checks_its_acls(tmp_path, make_api) -> None:
    api = make_api(tmp_path, allowed={(WRITE, TXN, "t"), (WRITE, TOPIC, "mine"), (DESCRIBE, TXN, "t")})
    assert api(ApiKey.INIT_PRODUCER_ID, 4, init("other"))["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert api(ApiKey.FIND_COORDINATOR, 1, {"key": "other", "key_type": 1})["error_code"] == \
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert api(ApiKey.INIT_PRODUCER_ID, 4, init())["error_code"] == E.NONE
    refused = api(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add({"mine": [0], "theirs": [1]}))
    assert {t["name"]: [p["partition_error_code"] for p in t["results"]] for t in refused["results"]} == {
        "mine": [E.OPERATION_NOT_ATTEMPTED], "theirs": [E.TOPIC_AUTHORIZATION_FAILED]}
    offsets = {"transactional_id": "t", "producer_id": 1000, "producer_epoch": 0, "group_id": "g"}
    assert api(ApiKey.ADD_OFFSETS_TO_TXN, 3, offsets)["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    assert api.coordinator._entries["t"].metadata.partitions == frozenset()
    assert api(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add({"mine": [0]}))["results"][0]["results"][0][
        "partition_error_code"] == E.NONE
    api.allowed.add((READ, GROUP, "g"))
    assert api(ApiKey.ADD_OFFSETS_TO_TXN, 3, offsets)["error_code"] == E.NONE
    end = {"transactional_id": "other", "producer_id": 1000, "producer_epoch": 0, "committed": True}
    assert api(ApiKey.END_TXN, 3, end)["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    described = api(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["t", "other"]})["transaction_states"]
    assert [(d["transactional_id"], d["error_code"], d["transaction_state"]) for d in described] == [
        ("t", E.NONE, "Ongoing"), ("other", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "")]
    assert described[0]["topics"][0] == {"topic": "__consumer_offsets", "partitions": [described[0]["topics"][0][
        "partitions"][0]]}
    api.allowed = {(WRITE, TXN, "u")}
    api(ApiKey.INIT_PRODUCER_ID, 4, init("u"))
    api.allowed = {(DESCRIBE, TXN, "u")}
    listed = api(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
    assert [t["transactional_id"] for t in listed["transaction_states"]] == ["u"]


def test_list_transactions_filters_by_state_producer_and_duration(tmp_path, make_api) -> None:
    api = make_api(tmp_path)
    api(ApiKey.INIT_PRODUCER_ID, 4, init("t"))
    api(ApiKey.INIT_PRODUCER_ID, 4, init("u"))
    api(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add({"a": [0]}))
    api.clock.now += 5000

    def listed(**filters) -> tuple[list[str], list[str]]:
        body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1, **filters}
        answer = api(ApiKey.LIST_TRANSACTIONS, 1, body)
        return [t["transactional_id"] for t in answer["transaction_states"]], answer["unknown_state_filters"]

    assert listed() == (["t", "u"], [])
    assert listed(state_filters=["Ongoing", "Bogus"]) == (["t"], ["Bogus"])
    assert listed(producer_id_filters=[1001]) == (["u"], [])
    assert listed(duration_filter=4000) == (["t"], [])
    assert listed(duration_filter=6000) == ([], [])
