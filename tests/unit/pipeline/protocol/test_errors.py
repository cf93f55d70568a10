"""Error codes, api keys and the exception clients raise."""

from __future__ import annotations

import pytest

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError, to_error_code


def test_error_codes_have_kafkas_numbers() -> None:
    expected = {
        "UNKNOWN_SERVER_ERROR": -1, "NONE": 0, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
        "UNKNOWN_TOPIC_OR_PARTITION": 3, "LEADER_NOT_AVAILABLE": 5, "NOT_LEADER_OR_FOLLOWER": 6,
        "REQUEST_TIMED_OUT": 7, "MESSAGE_TOO_LARGE": 10, "NETWORK_EXCEPTION": 13,
        "COORDINATOR_NOT_AVAILABLE": 15, "NOT_COORDINATOR": 16, "INVALID_TOPIC_EXCEPTION": 17,
        "RECORD_LIST_TOO_LARGE": 18, "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
        "ILLEGAL_GENERATION": 22, "UNKNOWN_MEMBER_ID": 25, "REBALANCE_IN_PROGRESS": 27,
        "TOPIC_AUTHORIZATION_FAILED": 29, "UNSUPPORTED_VERSION": 35, "TOPIC_ALREADY_EXISTS": 36,
        "INVALID_PARTITIONS": 37, "INVALID_REPLICATION_FACTOR": 38, "INVALID_REQUEST": 42,
        "POLICY_VIOLATION": 44, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45, "DUPLICATE_SEQUENCE_NUMBER": 46,
        "INVALID_PRODUCER_EPOCH": 47, "UNKNOWN_PRODUCER_ID": 59, "INVALID_RECORD": 87,
    }
    assert {name: ErrorCode[name].value for name in expected} == expected


def test_retriable_follows_kafka() -> None:
    retriable = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT,
                 ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                 ErrorCode.NOT_COORDINATOR, ErrorCode.CORRUPT_MESSAGE, ErrorCode.NETWORK_EXCEPTION}
    fatal = {ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.MESSAGE_TOO_LARGE,
             ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_TOPIC_EXCEPTION,
             ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.INVALID_RECORD}
    assert all(code.retriable for code in retriable)
    assert not any(code.retriable for code in fatal)


def test_kafka_protocol_error_carries_its_code() -> None:
    error = KafkaProtocolError(6, "partition moved")
    assert error.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert error.retriable
    assert str(error) == "NOT_LEADER_OR_FOLLOWER: partition moved"
    with pytest.raises(KafkaProtocolError) as caught:
        raise KafkaProtocolError(ErrorCode.TOPIC_ALREADY_EXISTS)
    assert not caught.value.retriable and str(caught.value) == "TOPIC_ALREADY_EXISTS"


def test_unknown_codes_map_to_unknown_server_error() -> None:
    assert to_error_code(9999) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert to_error_code(36) is ErrorCode.TOPIC_ALREADY_EXISTS


def test_api_keys_have_kafkas_numbers() -> None:
    assert (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA) == (0, 1, 2, 3)
    assert (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP) == (8, 9, 10, 11)
    assert (ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP) == (12, 13, 14)
    assert (ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.INIT_PRODUCER_ID) == (18, 19, 20, 22)
    assert [k.value for k in ApiKey] == list(range(len(ApiKey)))
