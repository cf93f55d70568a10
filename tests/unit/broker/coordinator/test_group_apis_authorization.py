"""GroupApis with an authorizer: each group API's operation (READ on the group to take part, DESCRIBE to find and
describe it, DELETE to delete it, READ on the topics committed) and Kafka's error codes, refused requests never
reaching the coordinator; listings leave out what may not be described."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.coordinator.group_apis import GroupApis
from broker.metadata import BrokerEndpoint
from pipeline.protocol.errors import ErrorCode
from pipeline.security.acl import AclOperation, ResourceType

READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER


class FakeCoordinator:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def join_group(self, *args, **kwargs):
        self.calls.append("join")
        return {"error_code": ErrorCode.NONE}

    async def commit_offsets(self, group_id, generation, member, instance, offsets, **kwargs):
        self.calls.append(f"commit {sorted(offsets)}")
        return {key: ErrorCode.NONE for key in offsets}

    async def fetch_offsets(self, group_id, wanted):
        self.calls.append("fetch")
        committed = SimpleNamespace(offset=5, metadata="")
        return ErrorCode.NONE, {("mine", 0): committed, ("theirs", 0): committed}

    async def list_groups(self):
        return ErrorCode.NONE, [{"group_id": g, "protocol_type": "consumer", "group_state": "Stable"}
                                for g in ("mine", "theirs")]

    async def describe_group(self, group_id):
        return {"error_code": ErrorCode.NONE, "group_id": group_id}

    async def delete_group(self, group_id):
        self.calls.append(f"delete {group_id}")
        return ErrorCode.NONE


def apis(*allowed: tuple[AclOperation, ResourceType, str]) -> tuple[GroupApis, FakeCoordinator]:
    coordinator = FakeCoordinator()
    group_apis = GroupApis(coordinator, lambda group: BrokerEndpoint(1, "127.0.0.1", 9092))
    group_apis.request_check = lambda: lambda operation, kind, name, count=True: (operation, kind, name) in allowed
    return group_apis, coordinator


def header(version: int) -> SimpleNamespace:
    return SimpleNamespace(api_version=version, client_id="c")


def run(result):
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def test_find_coordinator_needs_describe_on_the_group():
    group_apis, _ = apis((DESCRIBE, GROUP, "mine"))
    assert run(group_apis.handle_find_coordinator(header(1), {"key": "mine", "key_type": 0}))["error_code"] == 0
    assert run(group_apis.handle_find_coordinator(header(1), {"key": "other", "key_type": 0}))["error_code"] == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_membership_needs_read_on_the_group():
    group_apis, coordinator = apis()
    join = {"group_id": "g", "member_id": "", "session_timeout_ms": 6000, "protocol_type": "consumer",
            "protocols": []}
    assert run(group_apis.handle_join_group(header(5), join))["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    sync = {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []}
    assert run(group_apis.handle_sync_group(header(3), sync))["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    beat = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    assert run(group_apis.handle_heartbeat(header(3), beat))["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    leave = {"group_id": "g", "member_id": "m"}
    assert run(group_apis.handle_leave_group(header(1), leave))["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert coordinator.calls == []


def commit_request(group: str) -> dict:
    return {"group_id": group, "generation_id": -1, "member_id": "", "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}
        for topic in ("mine", "theirs")]}


def codes(response: dict) -> dict[str, int]:
    return {t["name"]: t["partitions"][0]["error_code"] for t in response["topics"]}


def test_offset_commit_needs_read_on_the_group_and_on_each_topic():
    group_apis, coordinator = apis((READ, GROUP, "g"), (READ, TOPIC, "mine"))
    assert codes(run(group_apis.handle_offset_commit(header(2), commit_request("g")))) == {
        "mine": ErrorCode.NONE, "theirs": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert coordinator.calls == ["commit [('mine', 0)]"]
    assert set(codes(run(group_apis.handle_offset_commit(header(2), commit_request("other")))).values()) == {
        ErrorCode.GROUP_AUTHORIZATION_FAILED}
    assert coordinator.calls == ["commit [('mine', 0)]"]


def test_offset_fetch_needs_describe_on_the_group_and_hides_or_refuses_topics():
    group_apis, _ = apis((DESCRIBE, GROUP, "g"), (DESCRIBE, TOPIC, "mine"))
    everything = run(group_apis.handle_offset_fetch(header(3), {"group_id": "g", "topics": None}))
    assert [t["name"] for t in everything["topics"]] == ["mine"]
    named = run(group_apis.handle_offset_fetch(header(3), {"group_id": "g", "topics": [
        {"name": "mine", "partition_indexes": [0]}, {"name": "theirs", "partition_indexes": [0]}]}))
    assert codes(named) == {"mine": ErrorCode.NONE, "theirs": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert [t["partitions"][0]["committed_offset"] for t in named["topics"]] == [5, -1]
    refused = run(group_apis.handle_offset_fetch(header(3), {"group_id": "other", "topics": None}))
    assert refused["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_listing_describing_and_deleting_groups():
    group_apis, coordinator = apis((DESCRIBE, GROUP, "mine"), (DELETE, GROUP, "mine"))
    listed = run(group_apis.handle_list_groups(header(3), {}))
    assert [g["group_id"] for g in listed["groups"]] == ["mine"]
    assert len(run(apis((DESCRIBE, CLUSTER, "kafka-cluster"))[0].handle_list_groups(header(3), {}))["groups"]) == 2
    described = run(group_apis.handle_describe_groups(header(3), {"groups": ["mine", "theirs"]}))["groups"]
    assert [g["error_code"] for g in described] == [ErrorCode.NONE, ErrorCode.GROUP_AUTHORIZATION_FAILED]
    deleted = run(group_apis.handle_delete_groups(header(1), {"groups_names": ["mine", "theirs"]}))["results"]
    assert [r["error_code"] for r in deleted] == [ErrorCode.NONE, ErrorCode.GROUP_AUTHORIZATION_FAILED]
    assert coordinator.calls == ["delete mine"]
