"""GroupApis: the group requests (FindCoordinator, JoinGroup ... DeleteGroups) decoded by KafkaApis, answered
by the GroupCoordinator.

This layer adapts protocol versions to the coordinator's calls (v0 JoinGroup has no rebalance timeout,
MEMBER_ID_REQUIRED is for v4 and later, LeaveGroup v3 batches members, OffsetCommit v1 carries commit
timestamps and v2-v4 a retention, OffsetFetch v2+ may ask for every partition and v7 for stable offsets only)
and finds coordinators. TxnOffsetCommit stores a transaction's offsets as pending; ``complete_txn_offsets`` is
how a transaction marker for ``__consumer_offsets`` (WriteTxnMarkers) reaches the coordinator.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from broker.coordinator.group_coordinator import NO_GENERATION

from broker.coordinator.group_coordinator import NO_OFFSET, GroupCoordinator, partitions_by_topic
from broker.metadata import BrokerEndpoint
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import RequestHeader
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import COORDINATOR_KEY_TYPE_GROUP, COORDINATOR_KEY_TYPE_TRANSACTION
from pipeline.security.acl import CLUSTER_NAME, AclOperation, ResourceType

Handler = Callable[[RequestHeader, dict], "dict | Awaitable[dict]"]
#: Whether one request may perform an operation on a resource: (operation, resource type, name, count=True).
Authorize = Callable[..., bool]
_READ, _DESCRIBE, _DELETE, _GROUP, _TOPIC = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                             ResourceType.GROUP, ResourceType.TOPIC)
_WRITE, _TRANSACTIONAL_ID = AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID


class GroupApis:
    """The group handlers of one broker; ``find_coordinator(group)`` is the coordinator's endpoint, or None
    while there is none (no live broker, or ZooKeeper unreachable)."""

    def __init__(self, coordinator: GroupCoordinator,
                 find_coordinator: Callable[[str], BrokerEndpoint | None]) -> None:
        self.coordinator = coordinator
        self._find = find_coordinator
        # The peer of the request being dispatched (KafkaApis sets it before each group handler runs).
        self.peer = ""
        # The authorization check of the request being dispatched (KafkaApis.request_check); handlers take it before
        # they first await, since the next request replaces it.
        self.request_check: Callable[[], Authorize] = lambda: _allow_all
        # The listener of the request being handled: FindCoordinator answers with that listener's endpoint.
        self.listener_name: str | None = None
        # The number of partitions of a topic, None when it does not exist (KafkaApis sets it from its metadata).
        self.partition_count: Callable[[str], int | None] = lambda topic: None

    def handlers(self) -> dict[int, Handler]:
        return {
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.JOIN_GROUP: self.handle_join_group,
            ApiKey.SYNC_GROUP: self.handle_sync_group,
            ApiKey.HEARTBEAT: self.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.handle_leave_group,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKey.LIST_GROUPS: self.handle_list_groups,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
        }

    # -- FindCoordinator -------------------------------------------------------------------------

    def handle_find_coordinator(self, header: RequestHeader, request: dict) -> dict:
        key_type = request.get("key_type", COORDINATOR_KEY_TYPE_GROUP)
        if key_type != COORDINATOR_KEY_TYPE_GROUP:
            # Key type 1 (transactions) reaches here only on a broker built without a transaction coordinator.
            if key_type == COORDINATOR_KEY_TYPE_TRANSACTION:
                return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker runs no transaction "
                                       "coordinator")
            return _no_coordinator(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
        if not request["key"]:
            return _no_coordinator(ErrorCode.INVALID_REQUEST, "the group id is empty")
        if not self.request_check()(_DESCRIBE, _GROUP, request["key"]):
            return _no_coordinator(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to describe the group")
        endpoint = self._find(request["key"])
        if endpoint is not None:
            endpoint = endpoint.on(self.listener_name)
        if endpoint is None:
            return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no live broker can coordinate the group now")
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
                "node_id": endpoint.broker_id, "host": endpoint.host, "port": endpoint.port}

    # -- membership ------------------------------------------------------------------------------

    def handle_join_group(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if not self.request_check()(_READ, _GROUP, request["group_id"]):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    "generation_id": NO_GENERATION, "protocol_name": "", "leader": "",
                    "member_id": request["member_id"], "members": []}
        # v0 has no rebalance timeout: Kafka uses the session timeout as the rebalance timeout.
        rebalance_timeout = request.get("rebalance_timeout_ms", -1)
        if rebalance_timeout < 0:
            rebalance_timeout = request["session_timeout_ms"]
        return self.coordinator.join_group(
            request["group_id"], request["member_id"], request.get("group_instance_id"), header.client_id or "",
            "/" + self.peer.rpartition(":")[0], rebalance_timeout, request["session_timeout_ms"],
            request["protocol_type"], [(p["name"], bytes(p["metadata"])) for p in request["protocols"]],
            require_known_member_id=header.api_version >= 4)

    def handle_sync_group(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if not self.request_check()(_READ, _GROUP, request["group_id"]):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
        assignments = {a["member_id"]: bytes(a["assignment"]) for a in request["assignments"]}
        return self.coordinator.sync_group(request["group_id"], request["generation_id"], request["member_id"],
                                           request.get("group_instance_id"), assignments)

    def handle_heartbeat(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if not self.request_check()(_READ, _GROUP, request["group_id"]):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        return self._heartbeat(request)

    async def _heartbeat(self, request: dict) -> dict:
        code = await self.coordinator.heartbeat(request["group_id"], request["generation_id"], request["member_id"],
                                                request.get("group_instance_id"))
        return {"throttle_time_ms": 0, "error_code": code}

    def handle_leave_group(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if not self.request_check()(_READ, _GROUP, request["group_id"]):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
        return self._leave_group(header, request)

    async def _leave_group(self, header: RequestHeader, request: dict) -> dict:
        if header.api_version >= 3:
            leaving = [(m["member_id"], m.get("group_instance_id")) for m in request["members"]]
        else:
            leaving = [(request["member_id"], None)]
        code, members = await self.coordinator.leave_group(request["group_id"], leaving)
        if header.api_version < 3 and code == ErrorCode.NONE and members:
            code = members[0]["error_code"]
        return {"throttle_time_ms": 0, "error_code": code, "members": members}

    # -- offsets ---------------------------------------------------------------------------------

    def handle_offset_commit(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        check = self.request_check()
        refused: dict[tuple[str, int], int] = {}
        if not check(_READ, _GROUP, request["group_id"]):
            refused = {(t["name"], p["partition_index"]): ErrorCode.GROUP_AUTHORIZATION_FAILED
                       for t in request["topics"] for p in t["partitions"]}
        else:
            for t in request["topics"]:
                if not check(_READ, _TOPIC, t["name"]):
                    refused.update({(t["name"], p["partition_index"]): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                                    for p in t["partitions"]})
        return self._commit_offsets(header.api_version, request, refused)

    async def _commit_offsets(self, version: int, request: dict, refused: dict[tuple[str, int], int]) -> dict:
        group_id = request["group_id"]
        if refused:
            kept = [{**t, "partitions": [p for p in t["partitions"] if (t["name"], p["partition_index"]) not in refused]}
                    for t in request["topics"]]
            request = {**request, "topics": [t for t in kept if t["partitions"]]}
        offsets = {(t["name"], p["partition_index"]): (p["committed_offset"], p["committed_metadata"])
                   for t in request["topics"] for p in t["partitions"]}
        timestamps = {p.get("commit_timestamp", -1) for t in request["topics"] for p in t["partitions"]}
        commit_timestamp = max(timestamps) if version == 1 and timestamps and min(timestamps) >= 0 else None
        retention = request.get("retention_time_ms", -1) if 2 <= version <= 4 else -1
        results = {} if refused and not offsets else await self.coordinator.commit_offsets(
            group_id, request.get("generation_id", -1) if version >= 1 else -1,
            request.get("member_id", "") if version >= 1 else "", request.get("group_instance_id"), offsets,
            retention_ms=retention if retention >= 0 else None, commit_timestamp_ms=commit_timestamp)
        results = {**results, **refused}
        return {"throttle_time_ms": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "error_code": results[(topic, p)]} for p in parts]}
            for topic, parts in partitions_by_topic(results).items()]}

    def handle_txn_offset_commit(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        check = self.request_check()
        keys = [(t["name"], p["partition_index"]) for t in request["topics"] for p in t["partitions"]]
        # Kafka's order: the transactional id, then the group refuse the whole request; then each topic.
        if not check(_WRITE, _TRANSACTIONAL_ID, request["transactional_id"]):
            return _txn_commit_answer({key: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for key in keys})
        if not check(_READ, _GROUP, request["group_id"]):
            return _txn_commit_answer({key: ErrorCode.GROUP_AUTHORIZATION_FAILED for key in keys})
        refused: dict[tuple[str, int], int] = {}
        readable = {t: check(_READ, _TOPIC, t) for t in {t for t, _ in keys}}
        for topic, partition in keys:
            count = self.partition_count(topic) if readable[topic] else None
            if not readable[topic]:
                refused[(topic, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif count is None or not 0 <= partition < count:
                refused[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return self._txn_commit_offsets(header.api_version, request, keys, refused)

    async def _txn_commit_offsets(self, version: int, request: dict, keys: list[tuple[str, int]],
                                  refused: dict[tuple[str, int], int]) -> dict:
        offsets = {(t["name"], p["partition_index"]): (p["committed_offset"], p["committed_metadata"])
                   for t in request["topics"] for p in t["partitions"]
                   if (t["name"], p["partition_index"]) not in refused}
        results: dict[tuple[str, int], int] = {}
        if offsets:
            results = await self.coordinator.txn_commit_offsets(
                request["group_id"], request["producer_id"], request["producer_epoch"],
                request.get("generation_id", -1) if version >= 3 else -1,
                request.get("member_id", "") if version >= 3 else "",
                request.get("group_instance_id") if version >= 3 else None, offsets)
        return _txn_commit_answer({key: refused.get(key, results.get(key, ErrorCode.NONE)) for key in keys})

    async def complete_txn_offsets(self, producer_id: int, producer_epoch: int, committed: bool,
                                   partition_index: int) -> int:
        """A transaction marker for ``__consumer_offsets`` partition ``partition_index`` (KafkaApis' WriteTxnMarkers
        handler calls this): the producer's pending offsets in the groups of that partition are committed or
        dropped; an error code (NONE also for a retried marker)."""
        return await self.coordinator.complete_txn_offsets(producer_id, producer_epoch, committed, partition_index)

    def handle_offset_fetch(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        return self._fetch_offsets(header, request, self.request_check())

    async def _fetch_offsets(self, header: RequestHeader, request: dict, check: Authorize) -> dict:
        topics = request["topics"]
        wanted = None if topics is None else [(t["name"], p) for t in topics for p in t["partition_indexes"]]
        unstable: set[tuple[str, int]] = set()
        if not check(_DESCRIBE, _GROUP, request["group_id"]):
            code, offsets = ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
        else:
            code, offsets = await self.coordinator.fetch_offsets(request["group_id"], wanted)
            if code == ErrorCode.NONE and request.get("require_stable"):
                # Kafka 2.5+: per partition, a pending transactional commit makes the answer unstable.
                code, unstable = await self.coordinator.unstable_offsets(request["group_id"])
        listed = wanted if wanted is not None else sorted(offsets)
        # Topics the principal may not describe: hidden from a listing of all, refused when named (Kafka's way).
        allowed = {t: check(_DESCRIBE, _TOPIC, t, count=wanted is not None)
                   for t in {topic for topic, _ in listed}}
        if wanted is None:
            listed = [key for key in listed if allowed[key[0]]]
        if code != ErrorCode.NONE and header.api_version < 2:
            # Versions without a group error code carry it in every partition.
            partition_code = code
        else:
            partition_code = ErrorCode.NONE
        answers = []
        for topic, parts in partitions_by_topic(listed).items():
            entries = []
            for p in parts:
                committed = offsets.get((topic, p))
                error = partition_code if allowed[topic] else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if not allowed[topic]:
                    committed = None
                elif (topic, p) in unstable:
                    committed, error = None, ErrorCode.UNSTABLE_OFFSET_COMMIT
                entries.append({"partition_index": p, "committed_offset": NO_OFFSET if committed is None
                                else committed.offset, "metadata": "" if committed is None else committed.metadata,
                                "error_code": error})
            answers.append({"name": topic, "partitions": entries})
        return {"throttle_time_ms": 0, "topics": answers, "error_code": code}

    # -- administration --------------------------------------------------------------------------

    def handle_describe_groups(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        check = self.request_check()
        return self._describe_groups([(g, check(_DESCRIBE, _GROUP, g)) for g in request["groups"]])

    async def _describe_groups(self, groups: list[tuple[str, bool]]) -> dict:
        return {"throttle_time_ms": 0,
                "groups": [await self.coordinator.describe_group(group_id) if allowed
                           else {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                                 "group_state": "", "protocol_type": "", "protocol_data": "", "members": []}
                           for group_id, allowed in groups]}

    def handle_list_groups(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        return self._list_groups(request, self.request_check())

    async def _list_groups(self, request: dict, check: Authorize) -> dict:
        code, groups = await self.coordinator.list_groups()
        if not check(_DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, count=False):
            # Without DESCRIBE on the cluster, only the groups the principal may describe.
            groups = [g for g in groups if check(_DESCRIBE, _GROUP, g["group_id"], count=False)]
        states = set(request.get("states_filter") or ())
        if states:
            groups = [g for g in groups if g["group_state"] in states]
        return {"throttle_time_ms": 0, "error_code": code, "groups": groups}

    def handle_delete_groups(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        check = self.request_check()
        return self._delete_groups([(g, check(_DELETE, _GROUP, g)) for g in request["groups_names"]])

    async def _delete_groups(self, groups: list[tuple[str, bool]]) -> dict:
        return {"throttle_time_ms": 0, "results": [
            {"group_id": group_id, "error_code": await self.coordinator.delete_group(group_id)
             if allowed else ErrorCode.GROUP_AUTHORIZATION_FAILED}
            for group_id, allowed in groups]}


def _allow_all(operation: AclOperation, resource_type: ResourceType, name: str, count: bool = True) -> bool:
    return True


def _txn_commit_answer(results: dict[tuple[str, int], int]) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "error_code": results[(topic, p)]} for p in parts]}
        for topic, parts in partitions_by_topic(results).items()]}


def _no_coordinator(code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
