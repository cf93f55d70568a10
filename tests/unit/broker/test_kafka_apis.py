"""KafkaApis's pure pieces, without a broker: a CreateTopics entry read and refused, a topic's result entry, the
codec and transactional bits read from a produced batch, and an API's name in logs and metrics."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.admin_manager import TopicError
from broker.kafka_apis import KafkaApis, _api_name, _compression_of, _has_transactional_batch
from pipeline.protocol.errors import ErrorCode

GZIP, LZ4 = 1, 3


def batch(compression: int = 0, transactional: bool = False) -> bytes:
    """One record batch as kafka-python writes it (an implementation independent of ours)."""
    producer = (7, 0, 0) if transactional else (-1, -1, -1)  # id, epoch, base sequence
    builder = DefaultRecordBatchBuilder(2, compression, transactional, *producer, batch_size=1 << 20)
    builder.append(0, 1_000, b"key", b"value " * 200, [])  # compressible: the builder keeps a codec only if it saves
    return bytes(builder.build())


def test_a_create_topics_entry_gives_its_name_partitions_replication_and_configs() -> None:
    entry = {"name": "clicks", "num_partitions": 3, "replication_factor": 2, "assignments": [],
             "configs": [{"name": "cleanup.policy", "value": "compact"}, {"name": "retention.ms", "value": "1000"}]}
    assert KafkaApis.topic_to_create(entry) == ("clicks", 3, 2, {"cleanup.policy": "compact", "retention.ms": "1000"})
    assert KafkaApis.topic_to_create({**entry, "configs": None})[3] == {}


def test_manual_replica_assignments_are_an_invalid_request() -> None:
    with pytest.raises(TopicError) as refused:
        KafkaApis.topic_to_create({"name": "t", "num_partitions": -1, "replication_factor": -1,
                                   "assignments": [{"partition_index": 0, "broker_ids": [1]}], "configs": []})
    assert refused.value.error_code == ErrorCode.INVALID_REQUEST


def test_a_topic_result_carries_the_error_code_and_message_or_none() -> None:
    assert KafkaApis.topic_result("t") == {"name": "t", "error_code": ErrorCode.NONE, "error_message": None}
    error = TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, "topic t already exists")
    assert KafkaApis.topic_result("t", error) == {"name": "t", "error_code": ErrorCode.TOPIC_ALREADY_EXISTS,
                                                  "error_message": str(error)}


@pytest.mark.parametrize("codec", [0, GZIP, LZ4])
def test_the_codec_is_read_from_the_first_batch(codec: int) -> None:
    data = batch(codec)
    assert _compression_of(data) == codec
    assert _compression_of(memoryview(data)) == codec


def test_records_too_short_to_hold_a_batch_header_have_no_codec() -> None:
    assert _compression_of(None) == 0
    assert _compression_of(batch(GZIP)[:20]) == 0


def test_a_transactional_batch_is_found_in_any_partition_of_any_topic() -> None:
    plain = {"topic": "a", "partition_data": [{"index": 0, "records": batch()}, {"index": 1, "records": None}]}
    assert not _has_transactional_batch([plain])
    short = {"topic": "b", "partition_data": [{"index": 0, "records": batch(transactional=True)[:20]}]}
    assert not _has_transactional_batch([plain, short])
    transactional = {"topic": "c", "partition_data": [{"index": 0, "records": batch(transactional=True)}]}
    assert _has_transactional_batch([plain, transactional])


def test_an_api_is_named_by_its_key_or_its_number_when_unknown() -> None:
    assert _api_name(0) == "PRODUCE"
    assert _api_name(18) == "API_VERSIONS"
    assert _api_name(9999) == "API 9999"
