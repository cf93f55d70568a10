"""fsyncs run off the event loop: a slow disk sync stalls no connection, acks wait for the sync
covering them, and concurrent appends share fsyncs (group commit).

The broker runs in this process so that ``os.fsync`` can be wrapped: the wrapper holds every fsync of
a segment's .log file until the test releases it, and records each one.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Callable

import pytest

from pipeline.protocol.errors import ErrorCode
from pipeline.records import encode_batch
from tests.support import wait_until
from tests.support.clients import create_topic
from tests.support.in_process_broker import InProcessBroker
from tests.support.wire import (
    API_PRODUCE,
    KafkaConnection,
    api_versions,
    fetch,
    parse_produce_response,
    produce,
    produce_request_body,
)

TOPIC = "synced"


class FsyncGate:
    """Wraps os.fsync: fsyncs of .log files below ``root`` are recorded and, while closed, held; while
    ``fail`` is set they raise EIO."""

    def __init__(self, root: Path, real_fsync: Callable[[int], None]) -> None:
        self.root = str(root)
        self.real_fsync = real_fsync
        self.open = threading.Event()
        self.open.set()
        self.lock = threading.Lock()
        self.log_syncs = 0
        self.waiting = 0
        self.fail = False
        self.events: list[str] = []

    def close(self) -> None:
        self.open.clear()

    def release(self) -> None:
        with self.lock:
            self.events.append("fsync released")
        self.open.set()

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(self.root) and path.endswith(".log"):
            with self.lock:
                self.log_syncs += 1
                self.waiting += 1
            try:
                assert self.open.wait(30), "the test never released the fsync"
            finally:
                with self.lock:
                    self.waiting -= 1
            if self.fail:
                raise OSError(errno.EIO, "injected fsync failure")
        self.real_fsync(fd)


@pytest.fixture
def gated_broker(tmp_path, monkeypatch):
    gate = FsyncGate(tmp_path, os.fsync)
    monkeypatch.setattr(os, "fsync", gate)
    broker = InProcessBroker(tmp_path / "logs", {"log.flush.interval.messages": 1}).start()
    try:
        create_topic(f"127.0.0.1:{broker.port}", TOPIC)
        yield broker, gate
    finally:
        gate.release()
        broker.stop()


def test_other_connections_are_served_while_an_fsync_is_in_progress(gated_broker):
    broker, gate = gated_broker
    gate.close()
    results = []

    def produce_one() -> None:
        with KafkaConnection("127.0.0.1", broker.port, timeout=30) as conn:
            result = produce(conn, TOPIC, 0, encode_batch([b"durable"]))
            with gate.lock:
                gate.events.append("produce answered")
            results.append(result)

    producer = threading.Thread(target=produce_one)
    producer.start()
    try:
        wait_until(lambda: gate.waiting, timeout=10, message="the produce's fsync to start")
        with KafkaConnection("127.0.0.1", broker.port, timeout=5) as other:
            assert api_versions(other)
            fetched = fetch(other, TOPIC, 0, 0, max_wait_ms=0)
            assert fetched.error_code == 0 and fetched.high_watermark == 1 and fetched.records
        assert gate.waiting and not results, "the acks=1 produce was answered before its fsync finished"
    finally:
        gate.release()
        producer.join(30)
    assert [r.error_code for r in results] == [0]
    assert gate.events == ["fsync released", "produce answered"]
    log = broker.server.log_manager.get_log(TOPIC, 0)
    assert log.recovery_point == 1


def test_concurrent_producers_share_fsyncs(gated_broker):
    broker, gate = gated_broker
    producers = 8
    conns = [KafkaConnection("127.0.0.1", broker.port, timeout=30) for _ in range(producers)]
    try:
        gate.close()
        correlation_ids = []
        for conn in conns:
            correlation_ids.append(conn.send(API_PRODUCE, 3, produce_request_body(TOPIC, [(0, encode_batch([b"m"]))])))
        log = broker.server.log_manager.get_log(TOPIC, 0)
        wait_until(lambda: log.log_end_offset == producers, timeout=10,
                   message=lambda: f"all {producers} appends while the first fsync is held (log end {log.log_end_offset})")
        gate.release()
        results = [parse_produce_response(conn.receive(cid))[0] for conn, cid in zip(conns, correlation_ids)]
    finally:
        gate.release()
        for conn in conns:
            conn.close()
    assert sorted(r.base_offset for r in results) == list(range(producers))
    assert all(r.error_code == 0 for r in results)
    assert gate.log_syncs < producers, f"{gate.log_syncs} fsyncs of the log for {producers} appends"
    assert log.recovery_point == producers


def test_a_failed_fsync_answers_kafka_storage_error_for_that_partition(gated_broker):
    broker, gate = gated_broker
    with KafkaConnection("127.0.0.1", broker.port, timeout=30) as conn:
        gate.fail = True
        failed = produce(conn, TOPIC, 0, encode_batch([b"not durable"]))
        gate.fail = False
        assert (failed.error_code, failed.base_offset) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
        assert api_versions(conn)
        later = produce(conn, TOPIC, 0, encode_batch([b"durable"]))
        assert (later.error_code, later.base_offset) == (0, 1)
