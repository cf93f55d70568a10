"""Raw consumer-group requests for tests and benchmarks that must play a member no real client would be.

A zombie that commits with an old generation or a made-up member id, a static member that comes back with
other metadata, or a committer that pipelines OffsetCommit requests, is easiest written by hand. Only
non-flexible versions are used (FindCoordinator v0, JoinGroup v1 or v5 for a group.instance.id, SyncGroup v0,
Heartbeat v0, LeaveGroup v0, OffsetCommit v2, OffsetFetch v1), so the request header v1 framing of
``wire.KafkaConnection`` applies. Member metadata and assignments use the consumer
protocol's version 0 layout, as the Java consumer writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support import wire

API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_FIND_COORDINATOR = 10
API_JOIN_GROUP = 11
API_HEARTBEAT = 12
API_LEAVE_GROUP = 13
API_SYNC_GROUP = 14

NONE = 0
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27


def subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """The consumer protocol's member metadata (version 0): the subscribed topics and the assignor's user data."""
    writer = wire.Writer().int16(0).array_len(len(topics))
    for topic in topics:
        writer.string(topic)
    return writer.bytes_(user_data).getvalue()


def assignment(partitions: dict[str, list[int]]) -> bytes:
    """The consumer protocol's assignment (version 0): topic -> partitions, no user data."""
    writer = wire.Writer().int16(0).array_len(len(partitions))
    for topic, indexes in partitions.items():
        writer.string(topic).array_len(len(indexes))
        for index in indexes:
            writer.int32(index)
    return writer.bytes_(None).getvalue()


@dataclass
class Coordinator:
    """A FindCoordinator answer."""

    error_code: int
    node_id: int
    host: str
    port: int


def find_coordinator(conn: wire.KafkaConnection, group: str) -> Coordinator:
    """FindCoordinator v0 for a group."""
    reader = conn.request(API_FIND_COORDINATOR, 0, wire.Writer().string(group).getvalue())
    return Coordinator(reader.int16(), reader.int32(), reader.string() or "", reader.int32())


@dataclass
class JoinResult:
    """A JoinGroup answer (v1 or v5)."""

    error_code: int
    generation_id: int
    protocol_name: str | None
    leader: str
    member_id: str
    members: dict[str, bytes]


def join_group_request(group: str, member_id: str, topics: list[str], session_timeout_ms: int,
                       rebalance_timeout_ms: int, instance_id: str | None = None, user_data: bytes | None = None
                       ) -> tuple[int, bytes]:
    """(version, body) of a JoinGroup offering the `range` assignor of the consumer protocol: v1, or v5 when the
    member is static (``instance_id``)."""
    writer = wire.Writer().string(group).int32(session_timeout_ms).int32(rebalance_timeout_ms).string(member_id)
    if instance_id is not None:
        writer.string(instance_id)
    writer.string("consumer").array_len(1).string("range").bytes_(subscription(topics, user_data))
    return (1 if instance_id is None else 5), writer.getvalue()


def parse_join_group(reader: wire.Reader, version: int) -> JoinResult:
    if version >= 2:
        reader.int32()  # throttle_time_ms
    error_code, generation, protocol = reader.int16(), reader.int32(), reader.string()
    leader, member_id = reader.string() or "", reader.string() or ""
    members = {}
    for _ in range(reader.int32()):
        name = reader.string() or ""
        if version >= 5:
            reader.string()  # group_instance_id
        members[name] = reader.bytes_() or b""
    return JoinResult(error_code, generation, protocol, leader, member_id, members)


def send_join_group(conn: wire.KafkaConnection, group: str, member_id: str, topics: list[str],
                    session_timeout_ms: int = 6000, rebalance_timeout_ms: int = 6000, instance_id: str | None = None,
                    user_data: bytes | None = None) -> tuple[int, int]:
    """Send JoinGroup without waiting (the answer comes when the rebalance completes); return (version,
    correlation id) for ``receive_join_group``."""
    version, body = join_group_request(group, member_id, topics, session_timeout_ms, rebalance_timeout_ms,
                                       instance_id, user_data)
    return version, conn.send(API_JOIN_GROUP, version, body)


def receive_join_group(conn: wire.KafkaConnection, sent: tuple[int, int]) -> JoinResult:
    version, correlation_id = sent
    return parse_join_group(conn.receive(correlation_id), version)


def join_group(conn: wire.KafkaConnection, group: str, member_id: str, topics: list[str],
               session_timeout_ms: int = 6000, rebalance_timeout_ms: int = 6000, instance_id: str | None = None,
               user_data: bytes | None = None) -> JoinResult:
    """JoinGroup and wait for its answer."""
    return receive_join_group(conn, send_join_group(conn, group, member_id, topics, session_timeout_ms,
                                                    rebalance_timeout_ms, instance_id, user_data))


def send_sync_group(conn: wire.KafkaConnection, group: str, generation_id: int, member_id: str,
                    assignments: dict[str, bytes] | None = None) -> int:
    """Send SyncGroup v0 (the leader passes every member's assignment); return its correlation id."""
    writer = wire.Writer().string(group).int32(generation_id).string(member_id).array_len(len(assignments or {}))
    for member, data in (assignments or {}).items():
        writer.string(member).bytes_(data)
    return conn.send(API_SYNC_GROUP, 0, writer.getvalue())


def receive_sync_group(conn: wire.KafkaConnection, correlation_id: int) -> tuple[int, bytes]:
    """The SyncGroup answer: (error code, this member's assignment)."""
    reader = conn.receive(correlation_id)
    return reader.int16(), reader.bytes_() or b""


def heartbeat(conn: wire.KafkaConnection, group: str, generation_id: int, member_id: str) -> int:
    """Heartbeat v0; return the error code."""
    body = wire.Writer().string(group).int32(generation_id).string(member_id).getvalue()
    return conn.request(API_HEARTBEAT, 0, body).int16()


def leave_group(conn: wire.KafkaConnection, group: str, member_id: str) -> int:
    """LeaveGroup v0; return the error code."""
    return conn.request(API_LEAVE_GROUP, 0, wire.Writer().string(group).string(member_id).getvalue()).int16()


def offset_commit_request(group: str, generation_id: int, member_id: str, topic: str,
                          offsets: dict[int, int], metadata: str = "") -> bytes:
    """An OffsetCommit v2 body for one topic (retention -1: the broker's default)."""
    writer = (wire.Writer().string(group).int32(generation_id).string(member_id).int64(-1)
              .array_len(1).string(topic).array_len(len(offsets)))
    for partition, offset in offsets.items():
        writer.int32(partition).int64(offset).string(metadata)
    return writer.getvalue()


def parse_offset_commit(reader: wire.Reader) -> dict[int, int]:
    """An OffsetCommit v2 answer for one topic: partition -> error code."""
    errors = {}
    for _ in range(reader.int32()):
        reader.string()
        for _ in range(reader.int32()):
            partition = reader.int32()
            errors[partition] = reader.int16()
    return errors


def offset_commit(conn: wire.KafkaConnection, group: str, generation_id: int, member_id: str, topic: str,
                  offsets: dict[int, int], metadata: str = "") -> dict[int, int]:
    """OffsetCommit v2; return partition -> error code."""
    body = offset_commit_request(group, generation_id, member_id, topic, offsets, metadata)
    return parse_offset_commit(conn.request(API_OFFSET_COMMIT, 2, body))


def offset_fetch(conn: wire.KafkaConnection, group: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """OffsetFetch v1: partition -> (committed offset or -1, error code)."""
    writer = wire.Writer().string(group).array_len(1).string(topic).array_len(len(partitions))
    for partition in partitions:
        writer.int32(partition)
    reader = conn.request(API_OFFSET_FETCH, 1, writer.getvalue())
    result = {}
    for _ in range(reader.int32()):
        reader.string()
        for _ in range(reader.int32()):
            partition, offset = reader.int32(), reader.int64()
            reader.string()  # metadata
            result[partition] = (offset, reader.int16())
    return result
