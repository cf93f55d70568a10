"""Kafka's consumer protocol: the Subscription and Assignment that consumers embed as opaque bytes
in JoinGroup (protocol metadata), SyncGroup (assignments) and DescribeGroups (member metadata and
assignment) when the group's protocol type is ``"consumer"``.

Facts from Kafka's ConsumerProtocolSubscription.json and ConsumerProtocolAssignment.json (versions
0-3, never flexible). Bodies are dicts with the codec's snake_case keys::

    subscription: topics, user_data, owned_partitions [{topic, partitions}] (v1+), generation_id (v2+),
                  rack_id (v3+)
    assignment:   assigned_partitions [{topic, partitions}], user_data

Bytes of a newer version are read with the v3 layout, ignoring what follows, as Kafka's clients do.
"""

from __future__ import annotations

from typing import Any, Iterable

from pipeline.protocol.codec import DataCodec
from pipeline.protocol.schema import Field as F

#: The protocol type of groups whose members are consumers using this protocol.
PROTOCOL_TYPE = "consumer"
#: The newest Subscription / Assignment version we write and read in full.
LATEST_VERSION = 3

SUBSCRIPTION = DataCodec("ConsumerProtocolSubscription", (
    F("Topics", "[]string", "0+"),
    F("UserData", "bytes", "0+", nullable="0+", default=None),
    F("OwnedPartitions", "[]TopicPartition", "1+", fields=(
        F("Topic", "string", "1+"),
        F("Partitions", "[]int32", "1+"),
    )),
    F("GenerationId", "int32", "2+", default=-1),
    F("RackId", "string", "3+", nullable="3+", default=None),
), latest=LATEST_VERSION)

ASSIGNMENT = DataCodec("ConsumerProtocolAssignment", (
    F("AssignedPartitions", "[]TopicPartition", "0+", fields=(
        F("Topic", "string", "0+"),
        F("Partitions", "[]int32", "0+"),
    )),
    F("UserData", "bytes", "0+", nullable="0+", default=None),
), latest=LATEST_VERSION)


def encode_subscription(subscription: dict, version: int = LATEST_VERSION) -> bytes:
    """A Subscription as JoinGroup's protocol metadata."""
    return SUBSCRIPTION.encode(subscription, version)


def decode_subscription(data: Any) -> dict:
    """A Subscription from JoinGroup/DescribeGroups metadata, with the ``version`` it was written in."""
    version, body = SUBSCRIPTION.decode(data)
    return {"version": version, **body}


def encode_assignment(assignment: dict, version: int = LATEST_VERSION) -> bytes:
    """An Assignment as SyncGroup's member assignment."""
    return ASSIGNMENT.encode(assignment, version)


def decode_assignment(data: Any) -> dict:
    """An Assignment from SyncGroup/DescribeGroups bytes, with the ``version`` it was written in."""
    version, body = ASSIGNMENT.decode(data)
    return {"version": version, **body}


def topic_partitions(entries: Iterable[dict]) -> list[tuple[str, int]]:
    """``[{topic, partitions}]`` (assigned or owned partitions) as sorted (topic, partition) pairs."""
    return sorted((entry["topic"], p) for entry in entries for p in entry["partitions"])


def by_topic(pairs: Iterable[tuple[str, int]]) -> list[dict]:
    """(topic, partition) pairs as the protocol's ``[{topic, partitions}]``, topics and partitions sorted."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, []).append(partition)
    return [{"topic": topic, "partitions": sorted(parts)} for topic, parts in sorted(grouped.items())]
