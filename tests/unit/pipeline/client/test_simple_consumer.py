"""SimpleConsumer logic against hand-built Fetch/ListOffsets responses: offsets, partial tails, the
doubling fetch size, corrupt batches, control batches, broker errors, request building."""

from __future__ import annotations

import crc32c
import pytest

from pipeline.client.errors import KafkaConnectionError, OffsetOutOfRange
from pipeline.client.simple_consumer import (
    FetchRequest,
    MessageSet,
    MessageSizeTooLarge,
    SimpleConsumer,
    fetch_request_body,
    read_message_set,
)
from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import CONTROL_FLAG, CorruptBatchError, iter_batches
from pipeline.protocol.codec import decode_response, encode_response
from pipeline.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.records import encode_batch

TS = 1_700_000_000_000
FETCH_VERSION = 11


def batch(base: int, count: int, *, size: int = 10, compression: int = NONE, headers: bool = False) -> bytes:
    values = [f"v{base + i}".encode().ljust(size, b".") for i in range(count)]
    keys = [f"k{base + i}".encode() for i in range(count)]
    hdrs = [[("h", f"{base + i}".encode())] for i in range(count)] if headers else None
    return encode_batch(values, keys, timestamp=TS + base, headers=hdrs, base_offset=base, compression=compression)


def control_batch(base: int) -> bytes:
    data = bytearray(encode_batch([b"\x00\x00\x00\x00"], [b"\x00\x00\x00\x00"], timestamp=TS, base_offset=base))
    # Set the control flag and recompute the CRC over attributes..end.
    attributes = int.from_bytes(data[21:23], "big") | CONTROL_FLAG
    data[21:23] = attributes.to_bytes(2, "big")
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def fetch_part(records: bytes | None, *, error: int = 0, high_watermark: int = 100, log_start: int = 0,
               partition: int = 0, topic: str = "t") -> dict:
    """One partition of a Fetch response as the real decoder produces it (records as a memoryview)."""
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": topic, "partitions": [{
        "partition_index": partition, "error_code": error, "high_watermark": high_watermark,
        "last_stable_offset": high_watermark, "log_start_offset": log_start, "aborted_transactions": None,
        "preferred_read_replica": -1, "records": records}]}]}
    frame = b"".join(bytes(c) for c in encode_response(ApiKey.FETCH, FETCH_VERSION, 1, body))
    _, decoded = decode_response(ApiKey.FETCH, FETCH_VERSION, frame[4:])
    return decoded["responses"][0]["partitions"][0]


def values(message_set: MessageSet) -> list[bytes]:
    return [m.value for m in message_set]


class FakeBroker:
    """A connection stand-in serving Fetch from in-memory logs, cutting at partition_max_bytes exactly
    (no whole-first-batch rule), and ListOffsets; it records every request."""

    def __init__(self, logs: dict[tuple[str, int], bytes], list_offsets_min_version: int = 0) -> None:
        self.logs = logs
        self.requests: list[tuple[int, dict, int | None]] = []
        self.broker_versions = {ApiKey.FETCH: (4, 11), ApiKey.LIST_OFFSETS: (list_offsets_min_version, 5)}
        self.versions = {ApiKey.FETCH: 11, ApiKey.LIST_OFFSETS: 5}
        self.fail_next = 0
        self.closed = 0

    def connect(self) -> None:
        pass

    def close(self) -> None:
        self.closed += 1

    def version(self, api_key: int) -> int:
        return self.versions[api_key]

    def request(self, api_key: int, body: dict, *, version: int | None = None) -> dict:
        self.requests.append((api_key, body, version))
        if self.fail_next:
            self.fail_next -= 1
            raise KafkaConnectionError("connection reset")
        if api_key == ApiKey.FETCH:
            return self._fetch(body)
        return self._list_offsets(body, version)

    def _fetch(self, body: dict) -> dict:
        responses = []
        for topic in body["topics"]:
            parts = []
            for part in topic["partitions"]:
                log = self.logs[(topic["topic"], part["partition"])]
                start = next((pos for pos, h in iter_batches(log) if h.next_offset > part["fetch_offset"]), len(log))
                records = log[start:start + part["partition_max_bytes"]]
                parts.append(fetch_part(records, partition=part["partition"], topic=topic["topic"]))
            responses.append({"topic": topic["topic"], "partitions": parts})
        return {"error_code": 0, "responses": responses}

    def _list_offsets(self, body: dict, version: int | None) -> dict:
        part = body["topics"][0]["partitions"][0]
        entry = {"partition_index": part["partition_index"], "error_code": 0}
        if version == 0:
            entry["old_style_offsets"] = [0, 40, 20, 60][: part["max_num_offsets"]]
        else:
            entry["offset"] = 60
        return {"topics": [{"name": body["topics"][0]["name"], "partitions": [entry]}]}


def test_records_before_the_requested_offset_are_skipped():
    data = batch(0, 5) + batch(5, 5)
    result = read_message_set("t", 0, 3, fetch_part(data))
    assert [m.offset for m in result] == [3, 4, 5, 6, 7, 8, 9]
    assert values(result)[0] == b"v3".ljust(10, b".")
    assert result.next_offset == 10 and result.high_watermark == 100 and not result.truncated
    assert len(result) == 7


def test_a_trailing_partial_batch_is_left_for_the_next_fetch():
    data = batch(0, 5) + batch(5, 5)
    result = read_message_set("t", 0, 0, fetch_part(data[:-7]))
    assert [m.offset for m in result] == [0, 1, 2, 3, 4]
    assert result.next_offset == 5 and not result.truncated


def test_only_a_partial_batch_marks_the_set_truncated():
    result = read_message_set("t", 0, 0, fetch_part(batch(0, 5)[:40]))
    assert result.truncated and list(result) == [] and result.next_offset == 0


def test_empty_records_mean_no_messages_and_the_same_offset():
    for records in (None, b""):
        result = read_message_set("t", 0, 7, fetch_part(records))
        assert list(result) == [] and result.next_offset == 7 and not result.truncated


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches_are_decompressed_with_keys_and_headers(codec):
    data = batch(0, 4, compression=codec, headers=True) + batch(4, 4, compression=codec, headers=True)
    result = read_message_set("t", 0, 2, fetch_part(data))
    got = [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in result]
    assert got == [(o, f"k{o}".encode(), f"v{o}".encode().ljust(10, b"."), (("h", f"{o}".encode()),),
                    TS + (0 if o < 4 else 4)) for o in range(2, 8)]


def test_a_corrupt_batch_raises_instead_of_being_skipped():
    data = bytearray(batch(0, 5) + batch(5, 5))
    data[-3] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        read_message_set("t", 0, 0, fetch_part(bytes(data)))


def test_a_control_batch_is_hidden_but_moves_the_next_offset():
    data = batch(0, 3) + control_batch(3)
    result = read_message_set("t", 0, 0, fetch_part(data))
    assert [m.offset for m in result] == [0, 1, 2]
    assert result.next_offset == 4


def test_out_of_range_carries_the_log_bounds():
    result = read_message_set("t", 0, 500, fetch_part(None, error=ErrorCode.OFFSET_OUT_OF_RANGE,
                                                      high_watermark=90, log_start=30))
    assert isinstance(result.error, OffsetOutOfRange)
    with pytest.raises(OffsetOutOfRange) as caught:
        list(result)
    assert (caught.value.offset, caught.value.log_start_offset, caught.value.high_watermark) == (500, 30, 90)


def test_other_broker_errors_raise_kafka_protocol_error():
    result = read_message_set("t", 0, 0, fetch_part(None, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    with pytest.raises(KafkaProtocolError) as caught:
        iter(result)
    assert caught.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and caught.value.retriable
    missing = read_message_set("t", 3, 0, None)
    assert missing.error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_request_body_groups_partitions_by_topic_in_order():
    body = fetch_request_body([FetchRequest("a", 1, 10, 100), FetchRequest("b", 0, 5, 200),
                               FetchRequest("a", 0, 7, 300)], max_wait_ms=250, min_bytes=1)
    assert [t["topic"] for t in body["topics"]] == ["a", "b"]
    assert [(p["partition"], p["fetch_offset"], p["partition_max_bytes"]) for p in body["topics"][0]["partitions"]] \
        == [(1, 10, 100), (0, 7, 300)]
    assert (body["max_wait_ms"], body["min_bytes"], body["max_bytes"]) == (250, 1, 600)
    with pytest.raises(ValueError):
        fetch_request_body([FetchRequest("a", 0, 0, 0)])


def test_multifetch_is_one_request_and_keeps_request_order():
    broker = FakeBroker({("t", 0): batch(0, 5), ("t", 1): batch(0, 3), ("u", 0): batch(0, 2)})
    consumer = SimpleConsumer("fake", 0, connection=broker)
    results = consumer.multifetch([FetchRequest("u", 0, 1), FetchRequest("t", 1, 0), FetchRequest("t", 0, 4)])
    assert len(broker.requests) == 1
    assert [(r.topic, r.partition, [m.offset for m in r]) for r in results] == \
        [("u", 0, [1]), ("t", 1, [0, 1, 2]), ("t", 0, [4])]
    with pytest.raises(ValueError, match="twice"):
        consumer.multifetch([FetchRequest("t", 0, 0), FetchRequest("t", 0, 1)])


def test_a_batch_larger_than_the_fetch_size_doubles_it_up_to_the_ceiling():
    big = batch(0, 10, size=300)
    broker = FakeBroker({("t", 0): big, ("t", 1): batch(0, 2)})
    consumer = SimpleConsumer("fake", 0, buffer_size=512, max_buffer_size=8192, connection=broker)
    results = consumer.multifetch([FetchRequest("t", 1, 0), FetchRequest("t", 0, 0)])
    assert [m.offset for m in results[1]] == list(range(10))
    assert [m.offset for m in results[0]] == [0, 1]
    sizes = [[p["partition_max_bytes"] for t in body["topics"] for p in t["partitions"]]
             for _, body, _ in broker.requests]
    # The retries ask only for the partition that did not fit, with doubled sizes until the batch fits.
    assert sizes == [[512, 512], [1024], [2048], [4096]]
    assert len(big) > 2048

    small = SimpleConsumer("fake", 0, buffer_size=512, max_buffer_size=2048, connection=FakeBroker({("t", 0): big}))
    with pytest.raises(MessageSizeTooLarge, match="2048"):
        small.fetch(FetchRequest("t", 0, 0))


def test_fetch_reconnects_once_after_a_connection_error():
    broker = FakeBroker({("t", 0): batch(0, 2)})
    broker.fail_next = 1
    consumer = SimpleConsumer("fake", 0, connection=broker)
    assert [m.offset for m in consumer.fetch(FetchRequest("t", 0, 0))] == [0, 1]
    assert broker.closed == 1
    broker.fail_next = 2
    with pytest.raises(KafkaConnectionError):
        consumer.fetch(FetchRequest("t", 0, 0))


def test_get_offsets_before_uses_v0_when_the_broker_speaks_it_and_sorts_descending():
    broker = FakeBroker({})
    consumer = SimpleConsumer("fake", 0, connection=broker)
    assert consumer.get_offsets_before("t", 0, -1, 3) == [40, 20, 0]
    assert broker.requests[-1][2] == 0 and broker.requests[-1][1]["topics"][0]["partitions"][0]["max_num_offsets"] == 3
    newer = FakeBroker({}, list_offsets_min_version=1)
    assert SimpleConsumer("fake", 0, connection=newer).get_offsets_before("t", 0, -1, 3) == [60]
    assert newer.requests[-1][2] == 5
