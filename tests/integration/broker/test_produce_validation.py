"""Produce answers for batches Kafka refuses, over a real socket to a real broker process: several
batches in one partition entry, transactional batches, zstd before Produce v7, unknown codecs, and
records that do not parse (with record_errors), while the connection keeps serving."""

from __future__ import annotations

import crc32c
import pytest

from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import ATTRIBUTES, CRC, TRANSACTIONAL_FLAG
from pipeline.protocol.compression import ZSTD
from pipeline.protocol.errors import ErrorCode
from pipeline.records import encode_batch
from tests.support.codec_client import Client, create_topic

TOPIC = "validated"


def produce_all(client: Client, partitions: dict[int, bytes], version: int = 8) -> dict[int, dict]:
    """One Produce request with one entry per partition of TOPIC; the answers by partition."""
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 10_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": p, "records": r}
                                                               for p, r in partitions.items()]}]}
    response = client.call(ApiKey.PRODUCE, version, body)
    return {entry["index"]: entry for entry in response["responses"][0]["partition_responses"]}


def log_end(client: Client, partition: int) -> int:
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": partition, "timestamp": -1,
                                                       "current_leader_epoch": -1}]}]}
    return client.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]["offset"]


@pytest.fixture
def conn(broker):
    connection = Client(broker.port)
    assert create_topic(connection, TOPIC, 2)["error_code"] == ErrorCode.NONE
    yield connection
    connection.close()


def reseal(batch: bytearray) -> bytes:
    batch[CRC : CRC + 4] = crc32c.crc32c(bytes(batch[ATTRIBUTES:])).to_bytes(4, "big")
    return bytes(batch)


def test_two_batches_in_one_partition_entry_are_refused_whole(conn):
    two = encode_batch([b"a", b"b"]) + encode_batch([b"c"])
    answer = produce_all(conn, {0: two})[0]
    assert answer["error_code"] == ErrorCode.INVALID_RECORD
    assert log_end(conn, 0) == 0
    assert produce_all(conn, {0: encode_batch([b"a"])})[0]["error_code"] == ErrorCode.NONE


@pytest.mark.parametrize("records", [b"", None], ids=["empty", "null"])
def test_a_partition_entry_without_a_batch(conn, records):
    answers = produce_all(conn, {0: records, 1: encode_batch([b"fine"])})
    assert answers[0]["error_code"] == ErrorCode.INVALID_RECORD
    assert answers[1]["error_code"] == ErrorCode.NONE


def test_records_that_do_not_parse_get_record_errors(conn):
    batch = bytearray(encode_batch([b"first", b"second", b"third"], timestamp=1_000))
    third_offset_delta = batch.rindex(b"third") - 3  # length varint 5 of "third", key -1, offset delta
    assert batch[third_offset_delta] == 4  # zigzag 2
    batch[third_offset_delta] = 8  # zigzag 4: not consecutive
    answers = produce_all(conn, {0: reseal(batch), 1: encode_batch([b"fine"])})
    assert answers[0]["error_code"] == ErrorCode.INVALID_RECORD
    assert [e["batch_index"] for e in answers[0]["record_errors"]] == [2]
    assert answers[1]["error_code"] == ErrorCode.NONE
    assert (log_end(conn, 0), log_end(conn, 1)) == (0, 1)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codec(conn, codec):
    batch = bytearray(encode_batch([b"x"]))
    batch[ATTRIBUTES + 1] |= codec
    assert produce_all(conn, {0: reseal(batch)})[0]["error_code"] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert log_end(conn, 0) == 0


def test_zstd_needs_produce_v7(conn):
    batch = encode_batch([b"x" * 100], compression=ZSTD)
    assert produce_all(conn, {0: batch}, version=6)[0]["error_code"] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert produce_all(conn, {0: batch}, version=7)[0]["error_code"] == ErrorCode.NONE


def test_a_transactional_batch_without_a_transaction_fails_the_whole_request(conn):
    transactional = encode_batch([b"x"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    assert transactional[ATTRIBUTES + 1] & TRANSACTIONAL_FLAG
    answers = produce_all(conn, {0: encode_batch([b"plain"]), 1: transactional})
    assert {p: a["error_code"] for p, a in answers.items()} == {
        0: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 1: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    assert (log_end(conn, 0), log_end(conn, 1)) == (0, 0)
