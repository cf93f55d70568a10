"""Compaction and retention of transactional data in a broker process (its cleaner worker process does the
cleaning): aborted records vanish without shadowing the committed ones, an open transaction is never cleaned,
stock read_committed consumers read exactly the committed latest record of each key; retention deletes
segments under an open transaction while the LSO stays at its first offset (bounded by the log start)."""

from __future__ import annotations

import pytest

from pipeline.protocol.errors import ErrorCode
from pipeline.records import encode_batch
from tests.support import transactions as txn
from tests.support.clients import confluent_consume, create_topic
from tests.support.codec_client import Client
from tests.support.compaction import compacted_topic_configs, is_roll, read_log
from tests.support.polling import wait_until
from tests.support.transactions import READ_COMMITTED, READ_UNCOMMITTED
from tests.support.wire import KafkaConnection

pytestmark = pytest.mark.timeout(180)

SEGMENT_BYTES = 16 * 1024
KEYS = 20
A, B, C = 9101, 9102, 9103


def key(index: int) -> bytes:
    return b"key-%02d" % index


def test_compaction_drops_aborted_records_and_stops_at_an_open_transaction(broker_factory):
    topic = "compacted-txn"
    broker = broker_factory(overrides={"log.cleaner.backoff.ms": 200})
    create_topic(broker.bootstrap, topic, configs=compacted_topic_configs(SEGMENT_BYTES))
    client = Client(broker.port)
    try:
        def write(records: bytes, transactional_id: str | None = None) -> int:
            answer = txn.produce(client, topic, records, transactional_id)
            assert answer["error_code"] == ErrorCode.NONE, answer
            return answer["base_offset"]

        def marker(pid: int, committed: bool) -> None:
            assert txn.write_markers(client, (pid, 0, committed, topic, [0])) == {(pid, topic, 0): ErrorCode.NONE}

        keys = [key(k) for k in range(KEYS)]
        write(encode_batch([b"first-%02d" % k for k in range(KEYS)], keys))
        for round_ in range(3):  # A rewrites every key three times, then aborts
            write(txn.txn_batch(A, round_ * KEYS, [b"aborted-%d" % round_] * KEYS, keys), "ta")
        marker(A, committed=False)
        write(txn.txn_batch(B, 0, [b"committed-b"] * (KEYS // 2), keys[: KEYS // 2]), "tb")
        marker(B, committed=True)
        roll = b"r" * (SEGMENT_BYTES - 200)
        write(encode_batch([roll], [b"~roll-1"]))
        open_offset = write(txn.txn_batch(C, 0, [b"open-c"], [key(0)]), "tc")
        write(encode_batch([roll], [b"~roll-2"]))

        expected = [b"committed-b"] * (KEYS // 2) + [b"first-%02d" % k for k in range(KEYS // 2, KEYS)]
        with KafkaConnection(broker.host, broker.port) as conn:
            def data() -> list[tuple[bytes, bytes]]:
                return [(r.key, r.value) for r in read_log(conn, topic) if r.key and r.key.startswith(b"key-")]

            def cleaned() -> list | None:
                found = data()
                return found if not any(v.startswith(b"aborted") for _, v in found) else None
            found = wait_until(cleaned, 60, interval=0.3, message=lambda: f"no aborted record left: {data()[:8]}")
        by_key = dict(found[:-1])
        assert [by_key[k] for k in keys] == expected, "the aborted records shadowed none of the committed ones"
        assert found[-1] == (key(0), b"open-c"), "the open transaction's record is not cleaned"
        assert txn.latest_offset(client, topic, READ_COMMITTED) == open_offset

        stock = confluent_consume(broker.bootstrap, topic, [0], KEYS + 1, timeout=30,
                                  **{"isolation.level": "read_committed"})
        latest = {}
        for record in stock:
            latest[record.key] = record.value
        assert [latest[k] for k in keys] == expected
        assert all(r.offset < open_offset for r in stock) and any(is_roll(r.key) for r in stock)
        marker(C, committed=True)
        assert txn.latest_offset(client, topic, READ_COMMITTED) == txn.latest_offset(client, topic, READ_UNCOMMITTED)
    finally:
        client.close()


def test_retention_under_an_open_transaction_keeps_the_lso_at_the_log_start(broker_factory):
    topic = "retained-txn"
    broker = broker_factory(overrides={"log.retention.check.interval.ms": 200})
    create_topic(broker.bootstrap, topic, configs={"segment.bytes": "1024", "retention.bytes": "2048",
                                                  "file.delete.delay.ms": "0"})
    client = Client(broker.port)
    try:
        first = txn.produce(client, topic, txn.txn_batch(C, 0, [b"open"]), "tc")
        assert first["error_code"] == ErrorCode.NONE
        for i in range(30):
            assert txn.produce(client, topic, encode_batch([b"v" * 300]))["error_code"] == ErrorCode.NONE

        def log_start() -> int | None:
            answer = txn.fetch(client, topic, READ_UNCOMMITTED, offset=0)
            return answer["log_start_offset"] if answer["log_start_offset"] > 0 else None
        start = wait_until(log_start, 30, interval=0.2, message="retention moving the log start")
        assert txn.latest_offset(client, topic, READ_COMMITTED) == start, "the open transaction holds the LSO"
        assert txn.write_markers(client, (C, 0, False, topic, [0])) == {(C, topic, 0): ErrorCode.NONE}
        assert txn.latest_offset(client, topic, READ_COMMITTED) == 32
    finally:
        client.close()
