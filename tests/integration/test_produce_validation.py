"""Produce answers for batches Kafka refuses, over a real socket to a real broker process: several
batches in one partition entry, transactional batches, zstd before Produce v7, unknown codecs, and
records that do not parse (with record_errors), while the connection keeps serving."""

from __future__ import annotations

import socket
import struct

import crc32c
import pytest

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.batch import ATTRIBUTES, CRC, TRANSACTIONAL_FLAG
from pipeline.protocol.codec import decode_response, encode_request
from pipeline.protocol.compression import ZSTD
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.records import encode_batch
from tests.support.clients import create_topic
from tests.support.wire import recv_exact

TOPIC = "validated"


class Connection:
    """One socket speaking our codec: Produce and ListOffsets requests, answered in order."""

    def __init__(self, broker) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=10)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: dict) -> dict:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "validation-test", body))
        (length,) = struct.unpack(">i", recv_exact(self.sock, 4))
        correlation_id, response = decode_response(api_key, version, recv_exact(self.sock, length))
        assert correlation_id == self.correlation_id
        return response

    def produce(self, partitions: dict[int, bytes], version: int = 8) -> dict[int, dict]:
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 10_000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": p, "records": r}
                                                                   for p, r in partitions.items()]}]}
        response = self.call(ApiKey.PRODUCE, version, body)
        return {entry["index"]: entry for entry in response["responses"][0]["partition_responses"]}

    def log_end(self, partition: int) -> int:
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": partition, "timestamp": -1,
                                                           "current_leader_epoch": -1}]}]}
        return self.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]["offset"]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def conn(broker):
    create_topic(broker.bootstrap, TOPIC, 2)
    connection = Connection(broker)
    yield connection
    connection.close()


def reseal(batch: bytearray) -> bytes:
    batch[CRC : CRC + 4] = crc32c.crc32c(bytes(batch[ATTRIBUTES:])).to_bytes(4, "big")
    return bytes(batch)


def test_two_batches_in_one_partition_entry_are_refused_whole(conn):
    two = encode_batch([b"a", b"b"]) + encode_batch([b"c"])
    answer = conn.produce({0: two})[0]
    assert answer["error_code"] == ErrorCode.INVALID_RECORD
    assert conn.log_end(0) == 0
    assert conn.produce({0: encode_batch([b"a"])})[0]["error_code"] == ErrorCode.NONE


def test_records_that_do_not_parse_get_record_errors(conn):
    batch = bytearray(encode_batch([b"first", b"second", b"third"], timestamp=1_000))
    third_offset_delta = batch.rindex(b"third") - 3  # length varint 5 of "third", key -1, offset delta
    assert batch[third_offset_delta] == 4  # zigzag 2
    batch[third_offset_delta] = 8  # zigzag 4: not consecutive
    answers = conn.produce({0: reseal(batch), 1: encode_batch([b"fine"])})
    assert answers[0]["error_code"] == ErrorCode.INVALID_RECORD
    assert [e["batch_index"] for e in answers[0]["record_errors"]] == [2]
    assert answers[1]["error_code"] == ErrorCode.NONE
    assert (conn.log_end(0), conn.log_end(1)) == (0, 1)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codec(conn, codec):
    batch = bytearray(encode_batch([b"x"]))
    batch[ATTRIBUTES + 1] |= codec
    assert conn.produce({0: reseal(batch)})[0]["error_code"] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert conn.log_end(0) == 0


def test_zstd_needs_produce_v7(conn):
    batch = encode_batch([b"x" * 100], compression=ZSTD)
    assert conn.produce({0: batch}, version=6)[0]["error_code"] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert conn.produce({0: batch}, version=7)[0]["error_code"] == ErrorCode.NONE


def test_a_transactional_batch_without_a_transaction_fails_the_whole_request(conn):
    transactional = encode_batch([b"x"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    assert transactional[ATTRIBUTES + 1] & TRANSACTIONAL_FLAG
    answers = conn.produce({0: encode_batch([b"plain"]), 1: transactional})
    assert {p: a["error_code"] for p, a in answers.items()} == {
        0: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 1: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    assert (conn.log_end(0), conn.log_end(1)) == (0, 0)
