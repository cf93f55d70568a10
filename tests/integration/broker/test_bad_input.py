"""Bad input on some connections must not disturb the broker or a client producing and consuming meanwhile.

Each abusive connection gets an answer or is dropped; the broker logs it and keeps serving.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.support import wait_until
from tests.support.clients import create_topic
from tests.support.wire import KafkaConnection, api_versions, encode_request, produce

CORRUPT_MESSAGE = 2


class Traffic:
    """A producer thread (acks=1, one message at a time) and a consumer thread (assign, poll) on one topic."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.stop = threading.Event()
        self.producer_done = threading.Event()
        self.sent: list[bytes] = []
        self.received: list[bytes] = []
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guard(self._produce), daemon=True),
                        threading.Thread(target=self._guard(self._consume), daemon=True)]

    def _guard(self, target):
        def run() -> None:
            try:
                target()
            except BaseException as error:  # surfaced by check(), the thread's only way to report
                self.errors.append(error)
        return run

    def _produce(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks=1, enable_idempotence=False)
        try:
            i = 0
            while not self.stop.is_set():
                value = f"steady {i}".encode()
                producer.send(self.topic, value=value, partition=0).get(timeout=10)
                self.sent.append(value)
                i += 1
        finally:
            producer.close(timeout=5)
            self.producer_done.set()

    def _consume(self) -> None:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False)
        try:
            tp = TopicPartition(self.topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            while not self._drained():
                for messages in consumer.poll(timeout_ms=200).values():
                    self.received.extend(m.value for m in messages)
        finally:
            consumer.close()

    def _drained(self) -> bool:
        """Once the producer finished: the consumer caught up with it, or the drain deadline passed."""
        if not self.producer_done.is_set():
            return False
        return len(self.received) >= len(self.sent) or time.monotonic() > self._drain_deadline

    def __enter__(self) -> Traffic:
        self._drain_deadline = float("inf")
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._drain_deadline = time.monotonic() + 20
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def check(self) -> None:
        assert not self.errors, f"client failed during the abuse: {self.errors[0]!r}"
        assert len(self.sent) > 0
        assert self.received == self.sent, f"consumer got {len(self.received)} messages, producer sent {len(self.sent)}"


def answered_or_dropped(sock: socket.socket, timeout: float = 10.0) -> str:
    """Wait until the broker sends something ("answered") or closes the connection ("dropped")."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return "dropped"
    except socket.timeout:
        raise AssertionError(f"broker neither answered nor closed the connection within {timeout}s")
    return "answered" if data else "dropped"


def dropped(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Wait until the broker closes the connection (reading and discarding anything it sends)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return False


def valid_batch(values: list[bytes]) -> bytearray:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=None, key=None, value=value, headers=[])
    return builder.build()


@pytest.fixture
def abused(broker):
    """The broker, a steady client running on it, and a helper that checks the broker logged each abuse."""
    create_topic(broker.bootstrap, "steady", 1)
    with Traffic(broker.bootstrap, "steady") as traffic:
        wait_until(lambda: len(traffic.received) >= 20 or traffic.errors, timeout=20, message="steady traffic to start")
        yield broker, traffic
    traffic.check()
    assert broker.is_running
    with KafkaConnection(broker.host, broker.port) as conn:
        assert 0 in api_versions(conn)


def connect(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=10)


def log_grows(broker, before: int) -> None:
    """Wait until the broker logged a warning or error after byte ``before`` of its log."""
    wait_until(lambda: any(level in broker.log_text()[before:] for level in ("WARNING", "ERROR")),
               timeout=10, message="the broker to log the bad input as a warning or error")


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_bytes(abused, seed):
    broker, traffic = abused
    blob = random.Random(seed).randbytes(4096)
    before = len(broker.log_text())
    with connect(broker) as sock:
        sock.sendall(blob)
        sock.shutdown(socket.SHUT_WR)
        answered_or_dropped(sock)
    log_grows(broker, before)
    assert broker.is_running


def test_truncated_frame(abused):
    broker, traffic = abused
    frame = encode_request(18, 0, 7, b"")
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", 100) + frame[4:])
        sock.shutdown(socket.SHUT_WR)
        assert dropped(sock), "a connection that ends inside a frame must be closed"
    with connect(broker) as sock:
        sock.sendall(frame[: len(frame) - 3])
        sock.shutdown(socket.SHUT_WR)
        assert dropped(sock)
    assert broker.is_running


@pytest.mark.parametrize("announced", [0x7FFFFFFF, -0x80000000, -1])
def test_huge_or_negative_frame_size_is_dropped_without_allocating(abused, announced):
    broker, traffic = abused
    rss_before = broker.rss_bytes()
    before = len(broker.log_text())
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", announced) + b"\x00" * 64)
        assert dropped(sock), f"a frame announcing {announced} bytes must be refused by closing the connection"
    log_grows(broker, before)
    assert broker.rss_bytes() < rss_before + 64 * 1024 * 1024


def test_batch_with_wrong_crc_is_rejected_and_log_untouched(abused):
    broker, traffic = abused
    topic = "crc-target"
    create_topic(broker.bootstrap, topic, 1)
    batch = valid_batch([b"first", b"second", b"third"])
    corrupt = bytearray(batch)
    corrupt[-2] ^= 0xFF
    before = len(broker.log_text())
    with KafkaConnection(broker.host, broker.port) as conn:
        result = produce(conn, topic, 0, bytes(corrupt))
        assert result.error_code == CORRUPT_MESSAGE
        log_grows(broker, before)
        assert sum(path.stat().st_size for path in broker.segment_files(topic, 0)) == 0, "a rejected batch must not be written"
        # The log did not advance: the next good batch still gets offset 0.
        good = produce(conn, topic, 0, bytes(batch))
        assert (good.error_code, good.base_offset) == (0, 0)


@pytest.mark.parametrize("api_key,api_version", [(999, 0), (32767, 3), (3, 999), (0, 999)],
                         ids=["unknown-key", "max-key", "metadata-v999", "produce-v999"])
def test_unknown_api_or_version(abused, api_key, api_version):
    broker, traffic = abused
    before = len(broker.log_text())
    with connect(broker) as sock:
        sock.sendall(encode_request(api_key, api_version, 42, b"\x00" * 16))
        outcome = answered_or_dropped(sock)
    if outcome == "dropped":
        log_grows(broker, before)
    assert broker.is_running
