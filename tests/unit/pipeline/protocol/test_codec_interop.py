"""Byte-level cross-checks against kafka-python 3.0.12 as an independent oracle.

Two of its encoders are used: the JSON-spec-driven classes (kafka.protocol.metadata/producer/
consumer/admin) for every API and version we declare, requests and responses, flexible versions
included; and the older hand-written Struct schemas (kafka.protocol.old) for the non-flexible
versions, fed positionally so a field in the wrong place or of the wrong width shows up.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

import pytest
from kafka.protocol.old.types import Schema

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
    read_request_header,
)
from pipeline.protocol.messages import APIS
from pipeline.protocol.schema import Field
from tests.unit.pipeline.protocol.test_schema_samples import normalize, sample_body

KAFKA_PYTHON = {
    ApiKey.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.METADATA: (MetadataRequest, MetadataResponse),
    ApiKey.PRODUCE: (ProduceRequest, ProduceResponse),
    ApiKey.FETCH: (FetchRequest, FetchResponse),
    ApiKey.LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse),
    ApiKey.CREATE_TOPICS: (CreateTopicsRequest, CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: (DeleteTopicsRequest, DeleteTopicsResponse),
    ApiKey.CREATE_PARTITIONS: (CreatePartitionsRequest, CreatePartitionsResponse),
    ApiKey.INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse),
    ApiKey.FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    ApiKey.DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    ApiKey.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse),
    ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse),
    ApiKey.DELETE_GROUPS: (DeleteGroupsRequest, DeleteGroupsResponse),
    ApiKey.ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    ApiKey.DESCRIBE_ACLS: (DescribeAclsRequest, DescribeAclsResponse),
    ApiKey.CREATE_ACLS: (CreateAclsRequest, CreateAclsResponse),
    ApiKey.DELETE_ACLS: (DeleteAclsRequest, DeleteAclsResponse),
    ApiKey.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    ApiKey.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (DescribeUserScramCredentialsRequest,
                                             DescribeUserScramCredentialsResponse),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (EndTxnRequest, EndTxnResponse),
    ApiKey.WRITE_TXN_MARKERS: (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: (DescribeTransactionsRequest, DescribeTransactionsResponse),
    ApiKey.LIST_TRANSACTIONS: (ListTransactionsRequest, ListTransactionsResponse),
}

# kafka-python renames these Metadata fields; Kafka (and we) call them *_authorized_operations. Its specs
# (Kafka 4) call OffsetCommit's GenerationId (Kafka 2.4's name, ours) GenerationIdOrMemberEpoch, and prefix
# AddPartitionsToTxn's client fields with V3AndBelow (v4 added a batched form for brokers, which we do not serve).
KAFKA_PYTHON_RENAMED = {
    "authorized_operations": ("cluster_authorized_operations", "topic_authorized_operations"),
    "generation_id_or_member_epoch": ("generation_id",),
    "v3_and_below_transactional_id": ("transactional_id",),
    "v3_and_below_producer_id": ("producer_id",),
    "v3_and_below_producer_epoch": ("producer_epoch",),
    "v3_and_below_topics": ("topics",),
    "results_by_topic_v3_and_below": ("results",),
    "results_by_partition": ("results",),
}


def bit_set(value: int) -> set[int]:
    """kafka-python holds an int32 bitfield as the set of its bit positions."""
    return {bit for bit in range(32) if (value >> bit) & 1}

ALL_VERSIONS = [(api.key, v) for api in APIS.values() for v in api.version_range]


def kp_build(cls: Any, body: dict, **kwargs: Any) -> Any:
    """A kafka-python message (or nested struct) holding the values of one of our body dicts."""
    values = {}
    for name, field in cls._struct.fields.items():
        key = next((k for k in (name, *KAFKA_PYTHON_RENAMED.get(name, ())) if k in body), None)
        if key is None:
            continue
        value = body[key]
        if value is not None and field.is_struct_array():
            value = [kp_build(field.data_class, item) for item in value]
        elif value is not None and field.is_struct():
            value = kp_build(field.data_class, value)
        elif name == "authorized_operations":
            value = bit_set(value)
        values[name] = value
    return cls(**values, **kwargs)


def _join(chunks: list) -> bytes:
    return b"".join(bytes(c) for c in chunks)


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS)
def test_requests_match_kafka_python(api_key: int, version: int) -> None:
    request_cls = KAFKA_PYTHON[api_key][0]
    rng = random.Random(7 * api_key + version)
    for _ in range(4):
        body = sample_body(APIS[api_key].request, version, rng)
        theirs = kp_build(request_cls, body, version=version)
        theirs.with_header(correlation_id=99, client_id="kafka-python-oracle")
        their_frame = bytes(theirs.encode(header=True, framed=True))
        assert encode_request(api_key, version, 99, "kafka-python-oracle", body) == their_frame
        header = read_request_header(their_frame, 4)
        assert header[:4] == (api_key, version, 99, "kafka-python-oracle")
        assert normalize(decode_request(header, their_frame, 4 + header.size)) == body


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS)
def test_responses_match_kafka_python(api_key: int, version: int) -> None:
    response_cls = KAFKA_PYTHON[api_key][1]
    rng = random.Random(11 * api_key + version)
    for _ in range(4):
        body = sample_body(APIS[api_key].response, version, rng)
        theirs = kp_build(response_cls, body, version=version)
        theirs.with_header(correlation_id=-5)
        their_frame = bytes(theirs.encode(header=True, framed=True))
        assert _join(encode_response(api_key, version, -5, body)) == their_frame
        assert normalize(decode_response(api_key, version, their_frame[4:])) == (-5, body)


def test_kafka_python_decodes_our_api_versions_v3_response() -> None:
    body = {"error_code": 0, "throttle_time_ms": 3,
            "api_keys": [{"api_key": k, "min_version": 0, "max_version": 5} for k in (0, 1, 18)],
            "finalized_features_epoch": 12, "zk_migration_ready": True}
    frame = _join(encode_response(ApiKey.API_VERSIONS, 3, 8, body))
    decoded = ApiVersionsResponse.decode(frame[4:], version=3, header=True)
    assert decoded.header.correlation_id == 8
    assert [(k.api_key, k.max_version) for k in decoded.api_keys] == [(0, 5), (1, 5), (18, 5)]
    assert decoded.throttle_time_ms == 3
    assert decoded.finalized_features_epoch == 12 and decoded.zk_migration_ready is True


# ---------------------------------------------------------------- kafka-python's hand-written schemas

def _positional(fields: tuple[Field, ...], version: int, body: dict, schema: Any) -> tuple:
    """Our body as the positional tuples an old Struct ``schema`` takes (declaration order).

    kafka-python writes an array of one-field structs (Metadata v0-9 topics) as an array of the
    bare values, which is the same bytes; follow its shape.
    """
    values = []
    present = [f for f in fields if f.exists_in(version)]
    assert len(present) == len(schema.fields)
    for f, their_type in zip(present, schema.fields):
        value = body[f.key]
        if value is not None and f.is_array and f.is_struct_like:
            element = their_type.array_of
            if isinstance(element, Schema):
                value = [_positional(f.fields, version, item, element) for item in value]
            else:
                value = [next(iter(item.values())) for item in value]
        elif f.key.endswith("authorized_operations"):
            value = bit_set(value)
        values.append(value)
    return tuple(values)


OLD_MODULES = {
    ApiKey.API_VERSIONS: "api_versions", ApiKey.METADATA: "metadata", ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch", ApiKey.LIST_OFFSETS: "list_offsets", ApiKey.CREATE_TOPICS: "admin",
    ApiKey.DELETE_TOPICS: "admin", ApiKey.INIT_PRODUCER_ID: "init_producer_id",
    ApiKey.FIND_COORDINATOR: "find_coordinator", ApiKey.JOIN_GROUP: "group", ApiKey.SYNC_GROUP: "group",
    ApiKey.HEARTBEAT: "group", ApiKey.LEAVE_GROUP: "group", ApiKey.OFFSET_COMMIT: "commit",
    ApiKey.OFFSET_FETCH: "commit", ApiKey.DESCRIBE_GROUPS: "admin", ApiKey.LIST_GROUPS: "admin",
    ApiKey.DELETE_GROUPS: "admin",
}


def _old_class(api_key: int, version: int, kind: str) -> Any:
    module = importlib.import_module(f"kafka.protocol.old.{OLD_MODULES[api_key]}")
    return getattr(module, f"{APIS[api_key].name}{kind}_v{version}")


def _has_old_class(api_key: int, version: int) -> bool:
    try:
        _old_class(api_key, version, "Request")
    except AttributeError:
        return False
    return True


# kafka.protocol.old stops at CreateTopics v3; its CreatePartitions nests count and assignment in a struct
# of its own (same bytes, another shape), so CreatePartitions is checked against the spec-driven classes only.
NON_FLEXIBLE = [(k, v) for k, v in ALL_VERSIONS
                if k in OLD_MODULES and not is_flexible(k, v) and _has_old_class(k, v)]


@pytest.mark.parametrize("api_key,version", NON_FLEXIBLE)
def test_bodies_match_kafka_python_hand_written_schemas(api_key: int, version: int) -> None:
    rng = random.Random(13 * api_key + version)
    api = APIS[api_key]
    for kind, fields in (("Request", api.request), ("Response", api.response)):
        old = _old_class(api_key, version, kind)
        for _ in range(3):
            body = sample_body(fields, version, rng)
            theirs = bytes(old.SCHEMA.encode(_positional(fields, version, body, old.SCHEMA)))
            if kind == "Request":
                frame = encode_request(api_key, version, 1, "c", body)
                ours = frame[4 + read_request_header(frame, 4).size:]
            else:
                ours = _join(encode_response(api_key, version, 1, body))[8:]
            assert ours == theirs
