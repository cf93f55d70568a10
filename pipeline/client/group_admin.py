"""The AdminClient's calls on broker-coordinated consumer groups (Kafka's Admin group methods).

FindCoordinator names the broker coordinating a group; DescribeGroups, OffsetFetch, OffsetCommit and
DeleteGroups go to it, and ListGroups goes to every live broker (each lists the groups it coordinates).
When the coordinator moves or is still loading (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS) or its connection breaks, the call asks FindCoordinator afresh and
retries until the client's timeout; every other error code surfaces as KafkaProtocolError.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, TypeVar

from pipeline.client.cluster import Cluster
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import KafkaConnectionError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import ProtocolError
from pipeline.protocol.consumer_protocol import (
    PROTOCOL_TYPE,
    by_topic,
    decode_assignment,
    decode_subscription,
    topic_partitions,
)
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.protocol.messages import COORDINATOR_KEY_TYPE_GROUP

#: The coordinator errors after which a call finds the coordinator again and retries.
COORDINATOR_RETRY_ERRORS = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
#: The generation and member id of a commit made outside any group generation (Kafka's "simple" commit).
NO_GENERATION = -1
NO_MEMBER_ID = ""
_RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5)

TopicPartition = tuple[str, int]
T = TypeVar("T")


@dataclass(frozen=True)
class GroupListing:
    """A group as ListGroups names it."""

    group_id: str
    protocol_type: str


@dataclass(frozen=True)
class MemberDescription:
    """A member of a group as DescribeGroups reports it, with its consumer-protocol subscription and
    assignment decoded (None when the group is not a consumer group or the member has none yet)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    subscription: dict | None
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class GroupDescription:
    """A group as its coordinator describes it: state (Empty, PreparingRebalance, CompletingRebalance,
    Stable, Dead), protocol type and the chosen protocol (the assignor, for consumers), members."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: int

    @property
    def is_active(self) -> bool:
        """Whether the group has members (Kafka refuses offset resets and deletes then)."""
        return bool(self.members) or self.state not in ("Empty", "Dead")


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset and the metadata its committer stored with it."""

    offset: int
    metadata: str | None = ""


class GroupCalls:
    """The group calls of AdminClient (mixed into it); they use its ``cluster``, ``timeout_s`` and ``_request``."""

    cluster: Cluster
    timeout_s: float
    _request: Callable[[BrokerConnection, int, dict], dict]

    # -- coordinators --------------------------------------------------------------------------

    def find_coordinator(self, group: str) -> int:
        """The id of the broker coordinating ``group``, retrying while none is available."""
        return self._with_coordinator(group, lambda node_id, connection: node_id)

    def _ask_coordinator(self, group: str, key_type: int = COORDINATOR_KEY_TYPE_GROUP) -> int:
        body = {"key": group, "key_type": key_type}
        response = self._request(self.cluster.any_connection(), ApiKey.FIND_COORDINATOR, body)
        if response["error_code"]:
            raise KafkaProtocolError(response["error_code"],
                                     response.get("error_message") or f"no coordinator for {group!r}")
        node_id = response["node_id"]
        if self.cluster.brokers().get(node_id) is None:
            self.cluster.refresh([])
        return node_id

    def _with_coordinator(self, group: str, call: Callable[[int, BrokerConnection], T],
                          key_type: int = COORDINATOR_KEY_TYPE_GROUP) -> T:
        """``call(coordinator id, connection)``, again with a fresh FindCoordinator after a coordinator error
        (raised by ``call`` as KafkaProtocolError) or a broken connection, until the timeout. ``key_type`` 1:
        ``group`` is a transactional id, and its transaction coordinator is asked."""
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            node_id = -1
            try:
                node_id = self._ask_coordinator(group, key_type)
                return call(node_id, self.cluster.connection(node_id))
            except KafkaProtocolError as exc:
                if exc.code not in COORDINATOR_RETRY_ERRORS or time.monotonic() >= deadline:
                    raise
            except KafkaConnectionError:
                if node_id >= 0:
                    self.cluster.invalidate(node_id)
                if time.monotonic() >= deadline:
                    raise
            time.sleep(min(_RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)],
                           max(0.0, deadline - time.monotonic())))
            attempt += 1

    def _coordinator_request(self, group: str, api_key: int, body: dict,
                             error_of: Callable[[dict], int]) -> tuple[int, dict]:
        """(coordinator id, response) of a request to ``group``'s coordinator whose ``error_of`` is no
        coordinator error (other error codes are left to the caller). UnsupportedVersionError at once when
        the brokers do not speak ``api_key`` at all (they coordinate no groups)."""
        self.cluster.any_connection().version(api_key)

        def call(node_id: int, connection: BrokerConnection) -> tuple[int, dict]:
            response = self._request(connection, api_key, body)
            code = error_of(response)
            if code in COORDINATOR_RETRY_ERRORS:
                raise KafkaProtocolError(code, f"broker {node_id} cannot serve group {group!r} now")
            return node_id, response

        return self._with_coordinator(group, call)

    # -- groups --------------------------------------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        """Every group the live brokers coordinate (ListGroups to each), sorted by id."""
        self.cluster.refresh([])
        found: dict[str, GroupListing] = {}
        for node_id in sorted(self.cluster.brokers()):
            deadline = time.monotonic() + self.timeout_s
            while True:
                response = self._request(self.cluster.connection(node_id), ApiKey.LIST_GROUPS, {})
                code = response["error_code"]
                if code not in COORDINATOR_RETRY_ERRORS or time.monotonic() >= deadline:
                    break
                time.sleep(_RETRY_BACKOFF_S[0])
            if code:
                raise KafkaProtocolError(code, f"broker {node_id} cannot list its groups")
            for entry in response["groups"]:
                found[entry["group_id"]] = GroupListing(entry["group_id"], entry["protocol_type"])
        return [found[g] for g in sorted(found)]

    def describe_groups(self, groups: str | Iterable[str]) -> list[GroupDescription]:
        """Describe each group (asking its coordinator), in the order given. A group nobody coordinates
        is described as Kafka does: state Dead, no members."""
        described = []
        for group in [groups] if isinstance(groups, str) else list(groups):
            node_id, response = self._coordinator_request(
                group, ApiKey.DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False},
                lambda r: r["groups"][0]["error_code"])
            entry = response["groups"][0]
            if entry["error_code"]:
                raise KafkaProtocolError(entry["error_code"], f"cannot describe group {group!r}")
            consumer = entry["protocol_type"] == PROTOCOL_TYPE
            members = tuple(_member(m, consumer) for m in entry["members"])
            described.append(GroupDescription(group, entry["group_state"], entry["protocol_type"],
                                              entry["protocol_data"], members, node_id))
        return described

    def delete_groups(self, groups: str | Iterable[str]) -> None:
        """Delete each group's offsets and metadata (DeleteGroups at its coordinator). Every group is
        tried; then the first refusal is raised (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)."""
        first_error: KafkaProtocolError | None = None
        for group in [groups] if isinstance(groups, str) else list(groups):
            _, response = self._coordinator_request(group, ApiKey.DELETE_GROUPS, {"groups_names": [group]},
                                                    lambda r: r["results"][0]["error_code"])
            code = response["results"][0]["error_code"]
            if code and first_error is None:
                first_error = KafkaProtocolError(code, f"cannot delete group {group!r}")
        if first_error is not None:
            raise first_error

    # -- offsets -------------------------------------------------------------------------------

    def fetch_offsets(self, group: str, partitions: Iterable[TopicPartition] | None = None, *,
                      require_stable: bool = False) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets ``group`` committed, for ``partitions`` (None: every partition it committed);
        partitions without a committed offset are left out. ``require_stable`` (OffsetFetch v7): while a
        transaction that sent offsets for a partition is still being completed, ask again (until the timeout)
        rather than read the offset it may be about to replace, as Kafka's read_committed consumers do."""
        wanted = None if partitions is None else [
            {"name": e["topic"], "partition_indexes": e["partitions"]} for e in by_topic(partitions)]
        body = {"group_id": group, "topics": wanted, "require_stable": require_stable}
        deadline = time.monotonic() + self.timeout_s
        while True:
            _, response = self._coordinator_request(group, ApiKey.OFFSET_FETCH, body, _offset_fetch_error)
            code = _offset_fetch_error(response)
            if code != ErrorCode.UNSTABLE_OFFSET_COMMIT or time.monotonic() >= deadline:
                break
            time.sleep(_RETRY_BACKOFF_S[1])
        if code:
            raise KafkaProtocolError(code, f"cannot fetch the offsets of group {group!r}")
        return {(topic["name"], p["partition_index"]): OffsetAndMetadata(p["committed_offset"], p["metadata"])
                for topic in response["topics"] for p in topic["partitions"] if p["committed_offset"] >= 0}

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit ``{(topic, partition): offset}`` for ``group`` outside any generation (Kafka's simple
        commit: generation -1, no member id), which the coordinator accepts only while the group is empty."""
        committed = {tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o) for tp, o in offsets.items()}
        body = {"group_id": group, "generation_id": NO_GENERATION, "member_id": NO_MEMBER_ID,
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": e["topic"], "partitions": [
                    {"partition_index": p, "committed_offset": committed[(e["topic"], p)].offset,
                     "committed_leader_epoch": -1, "commit_timestamp": -1,
                     "committed_metadata": committed[(e["topic"], p)].metadata} for p in e["partitions"]]}
                    for e in by_topic(committed)]}
        _, response = self._coordinator_request(group, ApiKey.OFFSET_COMMIT, body, _offset_commit_error)
        for topic in response["topics"]:
            for p in topic["partitions"]:
                if p["error_code"]:
                    raise KafkaProtocolError(p["error_code"], f"cannot commit {topic['name']}-{p['partition_index']} "
                                                              f"for group {group!r}")


def _member(entry: dict, consumer: bool) -> MemberDescription:
    subscription = None
    assignment: tuple[TopicPartition, ...] = ()
    if consumer:
        try:
            if entry["member_metadata"]:
                subscription = decode_subscription(entry["member_metadata"])
            if entry["member_assignment"]:
                assigned = decode_assignment(entry["member_assignment"])["assigned_partitions"]
                assignment = tuple(topic_partitions(assigned))
        except ProtocolError:
            # A member's opaque bytes that are not the consumer protocol do not hide the rest of the group.
            subscription = None
    return MemberDescription(entry["member_id"], entry["group_instance_id"], entry["client_id"],
                             entry["client_host"], subscription, assignment)


def _offset_fetch_error(response: dict) -> int:
    """The group-level error of an OffsetFetch response (v2+), else its first partition error."""
    return response.get("error_code") or _offset_commit_error(response)


def _offset_commit_error(response: dict) -> int:
    """The first partition error of an OffsetCommit/OffsetFetch response (where coordinator errors come
    before OffsetFetch v2)."""
    return next((p["error_code"] for t in response["topics"] for p in t["partitions"] if p["error_code"]), 0)
