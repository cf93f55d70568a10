"""The partition side of transactions against a real broker process, with raw requests: transactional
produce, WriteTxnMarkers, the LSO in ListOffsets and Fetch, AbortedTransactions, and stock read_committed
consumers (confluent-kafka, kafka-python) as oracles; the same after a clean restart and a SIGKILL."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.protocol.errors import ErrorCode
from pipeline.records import encode_batch
from pipeline.records.control import end_transaction_marker_batch
from tests.support import transactions as txn
from tests.support.clients import confluent_consume, kafka_python_consume
from tests.support.codec_client import Client, create_topic
from tests.support.transactions import data_values

TOPIC = "txn-data"
A, B = 7001, 7002
COMMITTED = [b"b0", b"b1", b"p0", b"p1"]
EVERYTHING = [b"a0", b"a1", b"b0", b"b1", b"p0", b"a2", b"p1"]


def produce(client: Client, records: bytes, transactional_id: str | None = None) -> dict:
    return txn.produce(client, TOPIC, records, transactional_id)


def txn_batch(pid: int, seq: int, *values: bytes) -> bytes:
    return txn.txn_batch(pid, seq, values)


def write_markers(client: Client, *markers: tuple[int, int, bool, str, list[int]], coordinator_epoch: int = 0) -> dict:
    return txn.write_markers(client, *markers, coordinator_epoch=coordinator_epoch)


def latest(client: Client, isolation_level: int) -> int:
    return txn.latest_offset(client, TOPIC, isolation_level)


def fetch(client: Client, isolation_level: int, offset: int = 0, max_wait_ms: int = 0) -> dict:
    return txn.fetch(client, TOPIC, isolation_level, offset, max_wait_ms)


def write_transactions(client: Client) -> None:
    """A aborted around B committed, plain records between: EVERYTHING, of which COMMITTED commit."""
    assert produce(client, txn_batch(A, 0, b"a0", b"a1"), "ta")["error_code"] == ErrorCode.NONE
    assert produce(client, txn_batch(B, 0, b"b0", b"b1"), "tb")["error_code"] == ErrorCode.NONE
    assert produce(client, encode_batch([b"p0"]))["error_code"] == ErrorCode.NONE
    assert produce(client, txn_batch(A, 2, b"a2"), "ta")["base_offset"] == 5
    assert latest(client, 0) == 6 and latest(client, 1) == 0
    unfinished = fetch(client, 1)
    assert (unfinished["last_stable_offset"], unfinished["high_watermark"]) == (0, 6)
    assert not unfinished["records"] and unfinished["aborted_transactions"] == []
    assert write_markers(client, (A, 0, False, TOPIC, [0])) == {(A, TOPIC, 0): ErrorCode.NONE}
    assert latest(client, 1) == 2, "B's transaction is still open"
    assert write_markers(client, (B, 0, True, TOPIC, [0])) == {(B, TOPIC, 0): ErrorCode.NONE}
    assert produce(client, encode_batch([b"p1"]))["base_offset"] == 8


def check_transactions(client: Client, bootstrap: str, end: int = 9, everything: list[bytes] = EVERYTHING,
                       aborted: tuple[tuple[int, int], ...] = ((A, 0),)) -> None:
    assert latest(client, 1) == latest(client, 0) == end
    committed = fetch(client, 1)
    assert committed["last_stable_offset"] == end
    assert committed["aborted_transactions"] == [{"producer_id": pid, "first_offset": first} for pid, first in aborted]
    assert data_values(committed["records"]) == everything
    uncommitted = fetch(client, 0)
    assert uncommitted["aborted_transactions"] is None and uncommitted["last_stable_offset"] == end
    stock = confluent_consume(bootstrap, TOPIC, [0], len(COMMITTED), timeout=30, **{"isolation.level": "read_committed"})
    assert [r.value for r in stock] == COMMITTED
    kafka_python = kafka_python_consume(bootstrap, TOPIC, [0], len(COMMITTED), timeout=30,
                                        isolation_level="read_committed")
    assert [r.value for r in kafka_python] == COMMITTED


@pytest.fixture
def client(broker):
    connection = Client(broker.port)
    assert create_topic(connection, TOPIC, 2)["error_code"] == ErrorCode.NONE
    yield connection
    connection.close()


def test_read_committed_readers_see_only_committed_data(broker, client):
    write_transactions(client)
    check_transactions(client, broker.bootstrap)
    uncommitted = confluent_consume(broker.bootstrap, TOPIC, [0], len(EVERYTHING), timeout=30,
                                    **{"isolation.level": "read_uncommitted"})  # librdkafka's default is committed
    assert [r.value for r in uncommitted] == EVERYTHING


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_a_restarted_broker_rebuilds_the_lso_and_the_aborted_index(broker, client, stop):
    write_transactions(client)
    assert produce(client, txn_batch(B, 2, b"b2"), "tb")["base_offset"] == 9  # left open
    client.close()
    broker.stop() if stop == "clean" else broker.kill()
    broker.start()
    again = Client(broker.port)
    try:
        assert latest(again, 1) == 9 and latest(again, 0) == 10
        assert write_markers(again, (B, 0, False, TOPIC, [0])) == {(B, TOPIC, 0): ErrorCode.NONE}
        check_transactions(again, broker.bootstrap, 11, EVERYTHING + [b"b2"], ((A, 0), (B, 9)))
    finally:
        again.close()


def test_a_waiting_read_committed_fetch_wakes_when_a_marker_lands(broker, client):
    assert produce(client, txn_batch(A, 0, b"a0"), "ta")["error_code"] == ErrorCode.NONE
    answers: list[dict] = []
    waiter = threading.Thread(target=lambda: answers.append(fetch(Client(broker.port), 1, max_wait_ms=20_000)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)  # the fetch is parked: nothing below the LSO
    assert write_markers(client, (A, 0, True, TOPIC, [0])) == {(A, TOPIC, 0): ErrorCode.NONE}
    waiter.join(timeout=15)
    assert answers and time.monotonic() - started < 10
    assert data_values(answers[0]["records"]) == [b"a0"] and answers[0]["last_stable_offset"] == 2


def test_write_txn_markers_answers_per_partition(client):
    assert produce(client, txn_batch(A, 0, b"a0"), "ta")["error_code"] == ErrorCode.NONE
    assert write_markers(client, (A, 0, True, TOPIC, [0]), coordinator_epoch=3) == {(A, TOPIC, 0): ErrorCode.NONE}
    answers = write_markers(client, (A, 0, False, TOPIC, [0, 1, 9]), (B, 0, True, "no-such-topic", [0]),
                            (A, 0, True, "__consumer_offsets", [4]), coordinator_epoch=2)
    assert answers == {
        (A, TOPIC, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        (A, TOPIC, 1): ErrorCode.NONE,
        (A, TOPIC, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (B, "no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (A, "__consumer_offsets", 4): answers[(A, "__consumer_offsets", 4)],
    }
    assert write_markers(client, (A, 1, False, TOPIC, [0]), coordinator_epoch=3) == {(A, TOPIC, 0): ErrorCode.NONE}
    assert write_markers(client, (A, 0, True, TOPIC, [0]), coordinator_epoch=3) == {
        (A, TOPIC, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    stale = produce(client, txn_batch(A, 1, b"zombie"), "ta")
    assert stale["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_transactional_batch_needs_a_transactional_id(client):
    refused = produce(client, txn_batch(A, 0, b"a0"))
    assert refused["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert latest(client, 0) == 0
    assert produce(client, txn_batch(A, 0, b"a0"), "ta")["error_code"] == ErrorCode.NONE


def test_clients_may_not_write_markers(client):
    forged = end_transaction_marker_batch(A, 0, True, 0, int(time.time() * 1000))
    assert produce(client, forged, "ta")["error_code"] == ErrorCode.INVALID_RECORD
    assert latest(client, 0) == 0
