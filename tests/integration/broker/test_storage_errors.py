"""A storage error on one partition answers KAFKA_STORAGE_ERROR for that partition only: the other
partitions of the same request are served and the connection stays open (a real broker process,
its files damaged on disk)."""

from __future__ import annotations

import pytest

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode
from pipeline.records import decode_records, encode_batch
from tests.support.codec_client import Client, create_topic, fetch_body, produce

TOPIC = "disk"
SEGMENT_BYTES = 1024


@pytest.fixture
def client(broker_factory):
    broker = broker_factory(overrides={"log.segment.bytes": SEGMENT_BYTES})
    connection = Client(broker.port)
    assert create_topic(connection, TOPIC, 2)["error_code"] == ErrorCode.NONE
    yield broker, connection
    connection.close()


def fetch_both(client: Client) -> dict[int, dict]:
    response = client.call(ApiKey.FETCH, 11, fetch_body([(TOPIC, 0, 0, 1 << 20), (TOPIC, 1, 0, 1 << 20)]))
    return {p["partition_index"]: p for p in response["responses"][0]["partitions"]}


def test_a_damaged_segment_fails_only_its_partition(client):
    broker, conn = client
    for partition in (0, 1):
        assert produce(conn, TOPIC, partition, encode_batch([b"v%d" % partition] * 3))["error_code"] == ErrorCode.NONE
    (segment,) = broker.segment_files(TOPIC, 0)
    with open(segment, "r+b") as damaged:
        damaged.seek(16)  # the first batch's magic byte
        damaged.write(b"\x07")

    answers = fetch_both(conn)
    assert answers[0]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert answers[1]["error_code"] == ErrorCode.NONE
    assert [r.value for r in decode_records(bytes(answers[1]["records"]))[0]] == [b"v1"] * 3

    by_time = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": p, "timestamp": 0, "current_leader_epoch": -1} for p in (0, 1)]}]}
    found = {p["partition_index"]: p for p in conn.call(ApiKey.LIST_OFFSETS, 5, by_time)["topics"][0]["partitions"]}
    assert found[0]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert (found[1]["error_code"], found[1]["offset"]) == (ErrorCode.NONE, 0)

    assert fetch_both(conn)[1]["error_code"] == ErrorCode.NONE  # the same connection is still served
    assert broker.is_running


def test_a_segment_that_cannot_be_created_fails_only_its_partition(client):
    broker, conn = client
    value = b"x" * 200
    assert produce(conn, TOPIC, 0, encode_batch([value] * 3))["base_offset"] == 0
    # The next append must roll to a segment at offset 3; a directory squats on its file name.
    blocker = broker.partition_dir(TOPIC, 0) / f"{3:020d}.log"
    blocker.mkdir()
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [{"name": TOPIC, "partition_data": [
        {"index": 0, "records": encode_batch([value] * 3)}, {"index": 1, "records": encode_batch([value])}]}]}
    answers = {p["index"]: p for p in conn.call(ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"]}
    assert answers[0]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert (answers[1]["error_code"], answers[1]["base_offset"]) == (ErrorCode.NONE, 0)

    blocker.rmdir()  # the disk is usable again: so is the partition, with nothing lost or doubled
    assert produce(conn, TOPIC, 0, encode_batch([value] * 3))["base_offset"] == 3
    records, _ = decode_records(bytes(fetch_both(conn)[0]["records"]))
    assert [r.offset for r in records] == [0, 1, 2]  # the first segment; the second starts at 3
    assert broker.is_running
