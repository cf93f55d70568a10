"""The AdminClient's group calls against scripted broker answers: coordinator look-up and its retries,
errors as KafkaProtocolError, ListGroups merged over brokers, decoded members, offsets in and out."""

from __future__ import annotations

from collections import deque

import pytest

from pipeline.client.errors import KafkaConnectionError, UnsupportedVersionError
from pipeline.client.group_admin import GroupCalls, OffsetAndMetadata
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.consumer_protocol import encode_assignment, encode_subscription
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError


class _Connection:
    def __init__(self, node_id: int, speaks: bool = True) -> None:
        self.node_id = node_id
        self.speaks = speaks

    def version(self, api_key: int) -> int:
        if not self.speaks:
            raise UnsupportedVersionError(f"no version of {api_key}")
        return 0


class _Cluster:
    """Two brokers; records which ones were invalidated."""

    def __init__(self) -> None:
        self.invalidated: list[int] = []
        self.speaks_group_apis = True

    def brokers(self) -> dict[int, tuple[str, int]]:
        return {1: ("h1", 1), 2: ("h2", 2)}

    def refresh(self, topics: list) -> None:
        pass

    def any_connection(self) -> _Connection:
        return _Connection(1, self.speaks_group_apis)

    def connection(self, node_id: int) -> _Connection:
        return _Connection(node_id)

    def invalidate(self, node_id: int) -> None:
        self.invalidated.append(node_id)


class ScriptedAdmin(GroupCalls):
    """GroupCalls whose requests are answered from per-API scripts (the last answer repeats)."""

    def __init__(self, scripts: dict[int, list], timeout_s: float = 2.0) -> None:
        self.cluster = _Cluster()
        self.timeout_s = timeout_s
        self.scripts = {key: deque(answers) for key, answers in scripts.items()}
        self.sent: list[tuple[int, int, dict]] = []

    def _request(self, connection: _Connection, api_key: int, body: dict) -> dict:
        self.sent.append((connection.node_id, api_key, body))
        script = self.scripts[api_key]
        answer = script.popleft() if len(script) > 1 else script[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(connection.node_id, body) if callable(answer) else answer


def coordinator(node_id: int, code: int = 0) -> dict:
    return {"error_code": code, "error_message": None, "node_id": node_id, "host": "h", "port": 1}


def commit_answer(code: int) -> dict:
    return {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": code}]}]}


def sent_to(admin: ScriptedAdmin, api_key: int) -> list[int]:
    return [node for node, key, _ in admin.sent if key == api_key]


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
def test_coordinator_errors_find_the_coordinator_again(code: int) -> None:
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1), coordinator(2)],
                           ApiKey.OFFSET_COMMIT: [commit_answer(code), commit_answer(0)]})
    admin.commit_offsets("g", {("t", 0): 5})
    assert sent_to(admin, ApiKey.FIND_COORDINATOR) == [1, 1]
    assert sent_to(admin, ApiKey.OFFSET_COMMIT) == [1, 2]
    body = admin.sent[-1][2]
    assert (body["generation_id"], body["member_id"]) == (-1, "")
    assert body["topics"] == [{"name": "t", "partitions": [{
        "partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "commit_timestamp": -1,
        "committed_metadata": ""}]}]


def test_find_coordinator_retries_while_none_is_available_then_gives_up() -> None:
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(-1, ErrorCode.COORDINATOR_NOT_AVAILABLE),
                                                     coordinator(2)]})
    assert admin.find_coordinator("g") == 2
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(-1, ErrorCode.COORDINATOR_NOT_AVAILABLE)]},
                          timeout_s=0.3)
    with pytest.raises(KafkaProtocolError) as caught:
        admin.find_coordinator("g")
    assert caught.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert len(sent_to(admin, ApiKey.FIND_COORDINATOR)) > 1


def test_a_broken_coordinator_connection_is_retried_elsewhere() -> None:
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1), coordinator(2)],
                           ApiKey.OFFSET_COMMIT: [KafkaConnectionError("reset"), commit_answer(0)]})
    admin.commit_offsets("g", {("t", 0): 1})
    assert sent_to(admin, ApiKey.OFFSET_COMMIT) == [1, 2] and admin.cluster.invalidated == [1]


def test_other_errors_surface_at_once() -> None:
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1)],
                           ApiKey.OFFSET_COMMIT: [commit_answer(ErrorCode.UNKNOWN_MEMBER_ID)]})
    with pytest.raises(KafkaProtocolError) as caught:
        admin.commit_offsets("g", {("t", 0): 1})
    assert caught.value.code == ErrorCode.UNKNOWN_MEMBER_ID and len(admin.sent) == 2


def test_list_groups_merges_every_broker() -> None:
    def listing(node_id: int, body: dict) -> dict:
        groups = {1: ["b", "a"], 2: ["c"]}[node_id]
        return {"error_code": 0, "groups": [{"group_id": g, "protocol_type": "consumer"} for g in groups]}

    admin = ScriptedAdmin({ApiKey.LIST_GROUPS: [listing]})
    assert [g.group_id for g in admin.list_groups()] == ["a", "b", "c"]
    assert sorted(sent_to(admin, ApiKey.LIST_GROUPS)) == [1, 2]


def test_describe_groups_decodes_consumer_members() -> None:
    member = {"member_id": "m-1", "group_instance_id": "static-1", "client_id": "rdkafka", "client_host": "/127.0.0.1",
              "member_metadata": encode_subscription({"topics": ["t"]}),
              "member_assignment": encode_assignment({"assigned_partitions": [{"topic": "t", "partitions": [1, 0]}]})}
    empty = dict(member, member_id="m-2", group_instance_id=None, member_assignment=b"")
    answer = {"groups": [{"error_code": 0, "group_id": "g", "group_state": "Stable", "protocol_type": "consumer",
                          "protocol_data": "range", "members": [member, empty]}]}
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(2)], ApiKey.DESCRIBE_GROUPS: [answer]})
    [group] = admin.describe_groups("g")
    assert (group.state, group.protocol, group.coordinator, group.is_active) == ("Stable", "range", 2, True)
    first, second = group.members
    assert first.assignment == (("t", 0), ("t", 1)) and first.subscription["topics"] == ["t"]
    assert (first.group_instance_id, first.client_id, first.host) == ("static-1", "rdkafka", "/127.0.0.1")
    assert second.assignment == () and second.group_instance_id is None


def test_offsets_fetch_leaves_out_uncommitted_partitions_and_raises_group_errors() -> None:
    answer = {"error_code": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 7, "metadata": "m", "error_code": 0},
        {"partition_index": 1, "committed_offset": -1, "metadata": "", "error_code": 0}]}]}
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1)], ApiKey.OFFSET_FETCH: [answer]})
    assert admin.fetch_offsets("g", [("t", 1), ("t", 0)]) == {("t", 0): OffsetAndMetadata(7, "m")}
    assert admin.sent[-1][2]["topics"] == [{"name": "t", "partition_indexes": [0, 1]}]
    admin.fetch_offsets("g")
    assert admin.sent[-1][2]["topics"] is None
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1)],
                           ApiKey.OFFSET_FETCH: [{"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []}]})
    with pytest.raises(KafkaProtocolError) as caught:
        admin.fetch_offsets("g")
    assert caught.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_require_stable_offsets_fetch_waits_out_a_pending_transactional_commit() -> None:
    unstable = {"error_code": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": -1, "metadata": "", "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT}]}]}
    stable = {"error_code": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 9, "metadata": "", "error_code": 0}]}]}
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1)], ApiKey.OFFSET_FETCH: [unstable, unstable, stable]})
    assert admin.fetch_offsets("g", [("t", 0)], require_stable=True) == {("t", 0): OffsetAndMetadata(9, "")}
    fetches = [body for _, key, body in admin.sent if key == ApiKey.OFFSET_FETCH]
    assert len(fetches) == 3 and all(body["require_stable"] for body in fetches)
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1)], ApiKey.OFFSET_FETCH: [unstable]},
                          timeout_s=0.3)
    with pytest.raises(KafkaProtocolError) as caught:
        admin.fetch_offsets("g", require_stable=True)
    assert caught.value.code == ErrorCode.UNSTABLE_OFFSET_COMMIT


def test_delete_groups_tries_every_group_then_raises_the_first_refusal() -> None:
    codes = {"a": ErrorCode.NON_EMPTY_GROUP, "b": ErrorCode.NONE, "c": ErrorCode.GROUP_ID_NOT_FOUND}

    def deleted(node_id: int, body: dict) -> dict:
        group = body["groups_names"][0]
        return {"results": [{"group_id": group, "error_code": codes[group]}]}

    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(1)], ApiKey.DELETE_GROUPS: [deleted]})
    with pytest.raises(KafkaProtocolError) as caught:
        admin.delete_groups(["a", "b", "c"])
    assert caught.value.code == ErrorCode.NON_EMPTY_GROUP and "'a'" in str(caught.value)
    assert [body["groups_names"] for _, key, body in admin.sent if key == ApiKey.DELETE_GROUPS] == [["a"], ["b"], ["c"]]


def test_brokers_without_group_apis_are_not_asked_for_a_coordinator() -> None:
    admin = ScriptedAdmin({ApiKey.FIND_COORDINATOR: [coordinator(-1, ErrorCode.COORDINATOR_NOT_AVAILABLE)]})
    admin.cluster.speaks_group_apis = False
    with pytest.raises(UnsupportedVersionError):
        admin.describe_groups("g")
    assert admin.sent == []
