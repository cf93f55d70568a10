"""GroupApis' TxnOffsetCommit (authorization in Kafka's order, unknown partitions, v3's member fields) and
OffsetFetch v7's RequireStable, on a real coordinator with the standalone file store."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.coordinator.group_apis import GroupApis
from broker.metadata import BrokerEndpoint
from pipeline.protocol.errors import ErrorCode
from pipeline.security.acl import AclOperation, ResourceType
from tests.unit.broker.coordinator.test_group_coordinator import make

WRITE, READ, DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE
TXN, GROUP, TOPIC = ResourceType.TRANSACTIONAL_ID, ResourceType.GROUP, ResourceType.TOPIC
EVERYTHING = {(WRITE, TXN, "tx"), (READ, GROUP, "g"), (DESCRIBE, GROUP, "g"), (READ, TOPIC, "t"), (READ, TOPIC, "u"),
              (DESCRIBE, TOPIC, "t"), (DESCRIBE, TOPIC, "u")}


def apis(tmp_path, allowed=EVERYTHING) -> GroupApis:
    group_apis = GroupApis(make(tmp_path), lambda group: BrokerEndpoint(1, "127.0.0.1", 9092))
    group_apis.request_check = lambda: lambda operation, kind, name, count=True: (operation, kind, name) in allowed
    group_apis.partition_count = {"t": 2, "u": 1}.get
    return group_apis


def header(version: int) -> SimpleNamespace:
    return SimpleNamespace(api_version=version, client_id="c")


def txn_commit_request(topics: dict[str, dict[int, int]], generation: int = -1, member: str = "") -> dict:
    return {"transactional_id": "tx", "group_id": "g", "producer_id": 9, "producer_epoch": 0,
            "generation_id": generation, "member_id": member, "group_instance_id": None,
            "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                   "committed_leader_epoch": -1, "committed_metadata": None}
                                                  for p, o in parts.items()]} for t, parts in topics.items()]}


async def call(result):
    return await result if asyncio.iscoroutine(result) else result


def codes(answer: dict) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}


async def fetch(group_apis: GroupApis, version: int, stable: bool) -> dict[tuple[str, int], tuple[int, int]]:
    request = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}], "require_stable": stable}
    answer = await call(group_apis.handle_offset_fetch(header(version), request))
    assert answer["error_code"] == ErrorCode.NONE
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["error_code"])
            for t in answer["topics"] for p in t["partitions"]}


def test_txn_offset_commit_refuses_as_kafka_does(tmp_path):
    async def scenario():
        request = txn_commit_request({"t": {0: 5}, "u": {0: 6}})
        every = {("t", 0), ("u", 0)}
        no_txn = apis(tmp_path, EVERYTHING - {(WRITE, TXN, "tx")})
        assert codes(await call(no_txn.handle_txn_offset_commit(header(3), request))) == {
            tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in every}
        no_group = apis(tmp_path, EVERYTHING - {(READ, GROUP, "g")})
        assert codes(await call(no_group.handle_txn_offset_commit(header(3), request))) == {
            tp: ErrorCode.GROUP_AUTHORIZATION_FAILED for tp in every}
        group_apis = apis(tmp_path, EVERYTHING - {(READ, TOPIC, "u")} | {(READ, TOPIC, "gone")})
        request = txn_commit_request({"t": {0: 5, 2: 7}, "u": {0: 6}, "gone": {0: 1}})
        assert codes(await call(group_apis.handle_txn_offset_commit(header(3), request))) == {
            ("t", 0): ErrorCode.NONE, ("t", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("u", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED, ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert await group_apis.coordinator.unstable_offsets("g") == (ErrorCode.NONE, {("t", 0)})
    asyncio.run(scenario())


def test_v3_checks_the_generation_and_earlier_versions_carry_none(tmp_path):
    async def scenario():
        group_apis = apis(tmp_path)
        request = txn_commit_request({"t": {0: 5}}, generation=3, member="someone")
        assert codes(await call(group_apis.handle_txn_offset_commit(header(3), request))) == {
            ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        # The same fields in a v2 request are not on the wire: the commit is a generation -1 one.
        assert codes(await call(group_apis.handle_txn_offset_commit(header(2), request))) == {
            ("t", 0): ErrorCode.NONE}
    asyncio.run(scenario())


def test_offset_fetch_v7_with_require_stable_answers_unstable_for_pending_partitions(tmp_path):
    async def scenario():
        group_apis = apis(tmp_path)
        await group_apis.coordinator.commit_offsets("g", -1, "", None, {("t", 0): (1, ""), ("t", 1): (2, "")})
        await call(group_apis.handle_txn_offset_commit(header(3), txn_commit_request({"t": {0: 10}})))
        assert await fetch(group_apis, 7, stable=True) == {
            ("t", 0): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), ("t", 1): (2, ErrorCode.NONE)}
        assert await fetch(group_apis, 7, stable=False) == {("t", 0): (1, ErrorCode.NONE),
                                                            ("t", 1): (2, ErrorCode.NONE)}
        partition = group_apis.coordinator.offsets_partition("g")
        assert await group_apis.complete_txn_offsets(9, 0, True, partition) == ErrorCode.NONE
        assert await fetch(group_apis, 7, stable=True) == {("t", 0): (10, ErrorCode.NONE),
                                                           ("t", 1): (2, ErrorCode.NONE)}
    asyncio.run(scenario())
