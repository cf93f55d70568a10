"""KafkaApis and transactions without a broker: who may produce transactional batches (a transactional id,
WRITE on it), WriteTxnMarkers' CLUSTER_ACTION check, and write_txn_markers routing data partitions to the
ReplicaManager and __consumer_offsets entries to the groups, answering each entry in the request's order."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.kafka_apis import KafkaApis
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode
from pipeline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, ResourcePattern, ResourceType
from tests.unit.broker.test_kafka_apis_authorization import dispatch, make_apis


def allow(apis: KafkaApis, user: str, operation: AclOperation, resource: ResourcePattern) -> None:
    apis.authorizer.apply(resource, {AccessControlEntry(f"User:{user}", "*", operation, AclPermissionType.ALLOW)})


def markers(*entries: tuple[int, bool, str, list[int]]) -> list[dict]:
    return [{"producer_id": pid, "producer_epoch": 1, "transaction_result": committed, "coordinator_epoch": 4,
             "topics": [{"name": topic, "partition_indexes": indexes}]} for pid, committed, topic, indexes in entries]


def codes(answer: list[dict]) -> list[tuple[int, str, int, int]]:
    return [(m["producer_id"], t["name"], p["partition_index"], p["error_code"])
            for m in answer for t in m["topics"] for p in t["partitions"]]


def test_transactional_batches_need_a_transactional_id_the_principal_may_write():
    apis = make_apis()
    allow(apis, "alice", AclOperation.WRITE, ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx"))
    dispatch(apis, "alice")
    assert apis._transactional_produce_refusal("tx") is None
    assert apis._transactional_produce_refusal(None) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert apis._transactional_produce_refusal("other") == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    dispatch(apis, "bob")
    assert apis._transactional_produce_refusal("tx") == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    apis.authorizer = None
    assert apis._transactional_produce_refusal("tx") is None
    assert apis._transactional_produce_refusal(None) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_write_txn_markers_needs_cluster_action():
    apis = make_apis()
    dispatch(apis, "broker", ApiKey.WRITE_TXN_MARKERS)
    request = {"markers": markers((7, True, "t", [0, 1]), (8, False, "__consumer_offsets", [3]))}
    refused = apis.handle_write_txn_markers(SimpleNamespace(api_version=1), request)
    assert codes(refused["markers"]) == [(7, "t", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                         (7, "t", 1, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                         (8, "__consumer_offsets", 3, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    allow(apis, "broker", AclOperation.CLUSTER_ACTION, ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"))
    apis.replica_manager.write_txn_markers = _data_writer([])
    apis.groups = SimpleNamespace()
    answered = asyncio.run(apis.handle_write_txn_markers(SimpleNamespace(api_version=1), request))
    assert codes(answered["markers"])[2] == (8, "__consumer_offsets", 3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _data_writer(calls: list) -> object:
    async def write(data: list, timeout_s: float) -> list[int]:
        calls.append(data)
        return [ErrorCode.NOT_LEADER_OR_FOLLOWER if index == 9 else ErrorCode.NONE for _, index, *_ in data]
    return write


def test_write_txn_markers_routes_data_and_offsets_partitions_and_answers_in_order():
    apis = make_apis()
    apis.authorizer = None
    calls: list = []
    offsets: list = []
    apis.replica_manager.write_txn_markers = _data_writer(calls)

    async def complete_txn_offsets(producer_id: int, epoch: int, committed: bool, partition: int) -> int:
        offsets.append((producer_id, epoch, committed, partition))
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    apis.groups = SimpleNamespace(complete_txn_offsets=complete_txn_offsets)
    answer = asyncio.run(apis.write_txn_markers(markers(
        (7, True, "t", [0, 9]), (8, False, "__consumer_offsets", [3]), (8, False, "u", [2]))))
    assert codes(answer) == [(7, "t", 0, ErrorCode.NONE), (7, "t", 9, ErrorCode.NOT_LEADER_OR_FOLLOWER),
                             (8, "__consumer_offsets", 3, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                             (8, "u", 2, ErrorCode.NONE)]
    assert calls == [[("t", 0, 7, 1, True, 4), ("t", 9, 7, 1, True, 4), ("u", 2, 8, 1, False, 4)]]
    assert offsets == [(8, 1, False, 3)]
