"""Topic administration (CreateTopics, DeleteTopics, auto-creation), acks=0 produce and Fetch long polling."""

from __future__ import annotations

import select
import time

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.support import wait_until
from tests.support.clients import create_topic, kafka_python_consume, run_kcat
from tests.support.segments import stored_batches
from tests.support.wire import API_FETCH, KafkaConnection, fetch, fetch_request_body, parse_fetch_response, produce

OFFSET_OUT_OF_RANGE = 1


def one_batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 16)
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def test_delete_topic_removes_it_from_metadata_and_disk(broker):
    create_topic(broker.bootstrap, "doomed", 2)
    create_topic(broker.bootstrap, "kept", 1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="test-admin")
    try:
        assert {"doomed", "kept"} <= set(admin.list_topics())
        admin.delete_topics(["doomed"])
        wait_until(lambda: "doomed" not in admin.list_topics(), timeout=10, message="doomed to leave the metadata")
        assert "kept" in admin.list_topics()
    finally:
        admin.close()
    wait_until(lambda: not broker.partition_dir("doomed", 0).exists() and not broker.partition_dir("doomed", 1).exists(),
               timeout=10, message="the deleted topic's partition directories to go")
    assert broker.partition_dir("kept", 0).exists()


def test_topic_is_auto_created_with_num_partitions(broker_factory):
    broker = broker_factory(overrides={"num.partitions": 3, "auto.create.topics.enable": "true"})
    run_kcat(["-b", broker.bootstrap, "-P", "-t", "auto-made", "-p", "2"], input_bytes=b"hello\n")
    listing = run_kcat(["-b", broker.bootstrap, "-L", "-t", "auto-made"]).decode()
    assert 'topic "auto-made" with 3 partitions' in listing, listing
    records = kafka_python_consume(broker.bootstrap, "auto-made", [2], 1)
    assert [r.value for r in records] == [b"hello"]


def test_acks0_produce_is_stored(broker):
    create_topic(broker.bootstrap, "fire-and-forget", 1)
    values = [f"acks0 {i}".encode() for i in range(500)]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=0, enable_idempotence=False)
    try:
        for value in values:
            producer.send("fire-and-forget", value=value, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    records = kafka_python_consume(broker.bootstrap, "fire-and-forget", [0], len(values))
    assert [r.value for r in records] == values
    assert sum(b.record_count for b in stored_batches(broker.partition_dir("fire-and-forget", 0))) == len(values)


def test_fetch_long_poll_waits_then_wakes_on_produce(broker):
    create_topic(broker.bootstrap, "long-poll", 1)
    with KafkaConnection(broker.host, broker.port) as conn:
        started = time.monotonic()
        empty = fetch(conn, "long-poll", 0, 0, max_wait_ms=800)
        waited = time.monotonic() - started
        assert (empty.error_code, empty.records) == (0, b"")
        assert waited >= 0.7, f"an empty fetch with max_wait 800 ms returned after {waited:.2f}s"

        # Park a fetch with a long max_wait; it must still be unanswered 0.3 s later.
        correlation_id = conn.send(API_FETCH, 4, fetch_request_body("long-poll", 0, 0, max_wait_ms=10_000))
        readable, _, _ = select.select([conn.sock], [], [], 0.3)
        assert not readable, "a fetch with nothing to return answered before max_wait"
        with KafkaConnection(broker.host, broker.port) as producer_conn:
            produced_at = time.monotonic()
            assert produce(producer_conn, "long-poll", 0, one_batch(b"wake up")).error_code == 0
        (woken,) = parse_fetch_response(conn.receive(correlation_id))
        elapsed = time.monotonic() - produced_at
        assert woken.error_code == 0 and woken.high_watermark == 1
        assert b"wake up" in woken.records
        assert elapsed < 2, f"the waiting fetch answered {elapsed:.2f}s after the produce, not when data arrived"

        beyond = fetch(conn, "long-poll", 0, 5, max_wait_ms=0)
        assert beyond.error_code == OFFSET_OUT_OF_RANGE
