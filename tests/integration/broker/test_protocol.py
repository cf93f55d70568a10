"""Broker behaviour at the protocol level that stock clients do not pin down, over a raw socket.

Version negotiation, long-poll fetches that wake when data arrives, Fetch size rules (KIP-74),
per-partition errors, acks=0 failures, topic admin errors and producer ids, spoken with our own codec
to a real broker process.
"""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import iter_batches
from pipeline.protocol.errors import ErrorCode
from pipeline.records import decode_records, encode_batch
from tests.support.broker_metrics import scrape, value
from tests.support.codec_client import Client, create_topic, fetch_body, produce


@pytest.fixture
def client(broker):
    connection = Client(broker.port)
    yield connection
    connection.close()


def values(records) -> list[bytes]:
    return [bytes(r.value) for r in decode_records(bytes(records))[0]]


def test_newer_api_versions_request_gets_v0_answer_with_our_range(client):
    # Version 9 with a body in a layout we cannot know: the broker must not try to parse it.
    client.send_raw_header(ApiKey.API_VERSIONS, 9, b"\x07future-body")
    _, body = client.receive(ApiKey.API_VERSIONS, 0)
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert ranges[ApiKey.API_VERSIONS][1] < 9
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS} <= set(ranges)
    # The connection stays usable for the retry at a version we support.
    retry = client.call(ApiKey.API_VERSIONS, ranges[ApiKey.API_VERSIONS][1], {})
    assert retry["error_code"] == ErrorCode.NONE


def test_unsupported_version_of_another_api_closes_only_that_connection(broker, client):
    client.send_raw_header(ApiKey.PRODUCE, 99)
    assert client.is_closed_by_peer()
    other = Client(broker.port)
    try:
        assert other.call(ApiKey.METADATA, 8, {"topics": None})["brokers"][0]["port"] == broker.port
    finally:
        other.close()
    assert "unsupported version 99" in broker.log_text()


def test_long_poll_fetch_wakes_when_data_arrives(broker, client):
    create_topic(client, "waiting", 1)
    producer = Client(broker.port)
    try:
        sent = client.send(ApiKey.FETCH, 11, fetch_body([("waiting", 0, 0, 1 << 20)], max_wait_ms=20000))
        started = time.monotonic()
        timer = threading.Timer(0.3, produce, args=(producer, "waiting", 0, encode_batch([b"wake up"])))
        timer.start()
        correlation, body = client.receive(ApiKey.FETCH, 11)
        elapsed = time.monotonic() - started
        timer.join()
    finally:
        producer.close()
    assert correlation == sent
    partition = body["responses"][0]["partitions"][0]
    assert values(partition["records"]) == [b"wake up"]
    # Woken by the append, long before the 20 s max wait.
    assert elapsed < 10


def test_fetch_with_no_data_returns_after_max_wait(client):
    create_topic(client, "quiet", 1)
    started = time.monotonic()
    body = client.call(ApiKey.FETCH, 11, fetch_body([("quiet", 0, 0, 1 << 20)], max_wait_ms=300))
    assert time.monotonic() - started >= 0.25
    partition = body["responses"][0]["partitions"][0]
    assert partition["error_code"] == ErrorCode.NONE
    assert len(partition["records"] or b"") == 0
    assert partition["high_watermark"] == 0


def test_fetch_size_limits_and_first_batch_always_whole(client):
    create_topic(client, "sizes", 2)
    big = encode_batch([b"B" * 5000])
    small = encode_batch([b"s" * 10] * 3)
    for _ in range(3):
        assert produce(client, "sizes", 0, big)["error_code"] == ErrorCode.NONE
        assert produce(client, "sizes", 1, small)["error_code"] == ErrorCode.NONE
    # The first batch (5 KB) exceeds both limits but comes whole; the request limit is then used up.
    body = client.call(ApiKey.FETCH, 11, fetch_body([("sizes", 0, 0, 100), ("sizes", 1, 0, 100)], max_bytes=1000))
    first, second = body["responses"][0]["partitions"]
    assert len(first["records"]) == len(big)
    assert values(first["records"]) == [b"B" * 5000]
    assert len(second["records"] or b"") == 0
    assert second["high_watermark"] == 9
    # With room, a partition limit cuts the region; whole batches decode, the partial tail is dropped.
    body = client.call(ApiKey.FETCH, 11, fetch_body([("sizes", 1, 0, len(small) + 20)]))
    records = body["responses"][0]["partitions"][0]["records"]
    assert len(records) == len(small) + 20
    parsed, stop = decode_records(bytes(records))
    assert [r.offset for r in parsed] == [0, 1, 2] and stop == len(small)
    # Fetching from the middle of a batch starts at that batch; the consumer skips earlier offsets.
    body = client.call(ApiKey.FETCH, 11, fetch_body([("sizes", 1, 4, 1 << 20)]))
    records = bytes(body["responses"][0]["partitions"][0]["records"])
    assert [h.base_offset for _, h in iter_batches(records)] == [3, 6]
    assert [r.offset for r in decode_records(records, min_offset=4)[0]] == [4, 5, 6, 7, 8]


def test_per_partition_errors_in_one_request(client):
    create_topic(client, "mixed", 1)
    produce(client, "mixed", 0, encode_batch([b"a", b"b"]))
    body = client.call(ApiKey.FETCH, 11, fetch_body([("mixed", 0, 0, 1 << 20), ("mixed", 0, 7, 1 << 20),
                                                     ("mixed", 5, 0, 1 << 20), ("absent", 0, 0, 1 << 20)]))
    codes = [p["error_code"] for t in body["responses"] for p in t["partitions"]]
    assert codes == [ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    result = produce(client, "absent", 0, encode_batch([b"x"]))
    assert result["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_oversized_batch_rejected_without_touching_the_log(broker_factory):
    broker = broker_factory(overrides={"message.max.bytes": 2000, "metrics.port": 0})
    client = Client(broker.port)
    try:
        create_topic(client, "limits", 1)
        for _ in range(20):
            result = produce(client, "limits", 0, encode_batch([b"x" * 5000]))
            assert result["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        assert produce(client, "limits", 0, encode_batch([b"fits"]))["base_offset"] == 0
        # A failed acks=0 produce drops the connection, the only signal such a producer can get.
        produce(client, "limits", 0, encode_batch([b"y" * 5000]), acks=0)
        assert client.is_closed_by_peer()
    finally:
        client.close()
    # One line per client and error a minute, not one per batch; each one counted.
    assert broker.log_text().count("rejected produce to limits-0") == 1
    assert "rejected produce to limits-0 from 127.0.0.1:" in broker.log_text()
    assert value(scrape(broker), "kafka_server_socket_server_metrics_client_errors_total",
                 kind="rejected_produce_message_too_large") == 21
    assert "an acks=0 produce request failed: MESSAGE_TOO_LARGE for 'limits' partition 0" in broker.log_text()
    assert (broker.partition_dir("limits", 0) / "00000000000000000000.log").stat().st_size == len(encode_batch([b"fits"]))


def test_list_offsets_earliest_latest_and_by_time(client):
    create_topic(client, "times", 1)
    for index, ts in enumerate((1000, 2000, 3000)):
        assert produce(client, "times", 0, encode_batch([b"%d" % index] * 2, timestamp=ts))["base_offset"] == index * 2

    def offsets(timestamp: int) -> tuple[int, int]:
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "times", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                              "timestamp": timestamp}]}]}
        part = client.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]
        assert part["error_code"] == ErrorCode.NONE
        return part["offset"], part["timestamp"]

    assert offsets(-2)[0] == 0
    assert offsets(-1)[0] == 6
    assert offsets(1500) == (2, 2000)
    assert offsets(3000) == (4, 3000)
    assert offsets(9999) == (-1, -1)


def test_create_and_delete_topic_errors(broker, client):
    assert create_topic(client, "admin", 3)["error_code"] == ErrorCode.NONE
    assert create_topic(client, "admin", 3)["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create_topic(client, "bad/name", 1)["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(client, "zero", 0)["error_code"] == ErrorCode.INVALID_PARTITIONS
    assert create_topic(client, "cfg", 1, {"no.such.config": "1"})["error_code"] == ErrorCode.INVALID_CONFIG
    body = {"topics": [{"name": "rf", "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
            "timeout_ms": 1000}
    assert client.call(ApiKey.CREATE_TOPICS, 4, body)["topics"][0]["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
    metadata = client.call(ApiKey.METADATA, 8, {"topics": [{"name": "admin"}], "allow_auto_topic_creation": False})
    assert [p["partition_index"] for p in metadata["topics"][0]["partitions"]] == [0, 1, 2]
    deleted = client.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["admin", "never"], "timeout_ms": 1000})
    assert [r["error_code"] for r in deleted["responses"]] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert not broker.partition_dir("admin", 0).exists()
    metadata = client.call(ApiKey.METADATA, 8, {"topics": [{"name": "admin"}], "allow_auto_topic_creation": False})
    assert metadata["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("name, value", [("segment.bytes", str(2**31)), ("segment.bytes", "13"), ("segment.ms", "0"),
                                         ("max.message.bytes", "-1"), ("retention.ms", "-2")])
def test_create_topic_with_a_config_outside_kafkas_bounds_is_invalid_config(broker, client, name, value):
    result = create_topic(client, "bounded", 1, {name: value})
    assert result["error_code"] == ErrorCode.INVALID_CONFIG
    assert f"{name}={value}" in result["error_message"]
    metadata = client.call(ApiKey.METADATA, 8, {"topics": [{"name": "bounded"}], "allow_auto_topic_creation": False})
    assert metadata["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_topics_and_producer_ids_survive_restart(broker, client):
    create_topic(client, "durable", 2, {"retention.ms": "-1"})
    produce(client, "durable", 1, encode_batch([b"kept"]))
    pid_before = client.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 1000})
    client.close()
    broker.restart()
    again = Client(broker.port)
    try:
        metadata = again.call(ApiKey.METADATA, 8, {"topics": [{"name": "durable"}], "allow_auto_topic_creation": False})
        assert len(metadata["topics"][0]["partitions"]) == 2
        body = again.call(ApiKey.FETCH, 11, fetch_body([("durable", 1, 0, 1 << 20)]))
        assert values(body["responses"][0]["partitions"][0]["records"]) == [b"kept"]
        pid_after = again.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 1000})
        assert pid_after["producer_id"] > pid_before["producer_id"]
    finally:
        again.close()


def test_idempotent_retry_is_acknowledged_once(client):
    create_topic(client, "idem", 1)
    pid = client.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 1000})

    def batch(seq: int, value: bytes) -> bytes:
        return encode_batch([value], producer_id=pid["producer_id"], producer_epoch=0, base_sequence=seq)

    assert produce(client, "idem", 0, batch(0, b"first"))["base_offset"] == 0
    retried = produce(client, "idem", 0, batch(0, b"first"))
    assert (retried["error_code"], retried["base_offset"]) == (ErrorCode.NONE, 0)
    assert produce(client, "idem", 0, batch(5, b"gap"))["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(client, "idem", 0, batch(1, b"second"))["base_offset"] == 1
    body = client.call(ApiKey.FETCH, 11, fetch_body([("idem", 0, 0, 1 << 20)]))
    assert values(body["responses"][0]["partitions"][0]["records"]) == [b"first", b"second"]


def test_find_coordinator_names_the_standalone_broker_for_groups_and_transactions(client, broker):
    for version in (0, 1, 2, 3):
        body = client.call(ApiKey.FIND_COORDINATOR, version, {"key": "some-group", "key_type": 0})
        assert (body["error_code"], body["node_id"], body["port"]) == (ErrorCode.NONE, 0, broker.port)
    for version in (1, 2, 3):
        body = client.call(ApiKey.FIND_COORDINATOR, version, {"key": "some-transaction", "key_type": 1})
        assert (body["error_code"], body["node_id"], body["port"]) == (ErrorCode.NONE, 0, broker.port)
    # Kafka's key types are 0 (group) and 1 (transaction); another is INVALID_REQUEST.
    body = client.call(ApiKey.FIND_COORDINATOR, 3, {"key": "x", "key_type": 2})
    assert body["error_code"] == ErrorCode.INVALID_REQUEST


def test_list_offsets_v0_gives_segment_starts_newest_first(broker_factory):
    broker = broker_factory(overrides={"log.segment.bytes": 100})
    client = Client(broker.port)
    try:
        create_topic(client, "paper", 1)
        for ts in (1000, 2000, 3000):
            produce(client, "paper", 0, encode_batch([b"x" * 80] * 2, timestamp=ts))

        def before(timestamp: int, max_num: int) -> list[int]:
            body = {"replica_id": -1, "topics": [{"name": "paper", "partitions": [
                {"partition_index": 0, "timestamp": timestamp, "max_num_offsets": max_num}]}]}
            part = client.call(ApiKey.LIST_OFFSETS, 0, body)["topics"][0]["partitions"][0]
            assert part["error_code"] == ErrorCode.NONE
            return part["old_style_offsets"]

        assert before(-1, 10)[0] == 6
        assert before(-1, 10) == sorted(before(-1, 10), reverse=True)
        assert before(-2, 10) == [0]
        assert before(2500, 10) == [2, 0]
        assert before(500, 10) == []
    finally:
        client.close()


def test_an_acks0_produce_to_an_unknown_partition_closes_naming_it(broker):
    client = Client(broker.port)
    try:
        produce(client, "nowhere", 3, encode_batch([b"x"]), acks=0)
        assert client.is_closed_by_peer()
    finally:
        client.close()
    assert ("an acks=0 produce request failed: UNKNOWN_TOPIC_OR_PARTITION for 'nowhere' partition 3\n"
            in broker.log_text())
