"""A reader of the audit never goes blind: a record that cannot be counted now is retried with backoff without
losing its place, one that can never be counted is skipped, counted and logged with its partition and offset,
and anything else stops the reader with its failure recorded and the service's stop event set. (The reader's loop
over a scripted stream; its counts and checkpoints are real.)"""

from __future__ import annotations

import logging
import threading
from audit.records import RetriableError, UnreadableRecord
from audit.readers import ClusterReader
from audit.state import CheckpointedCounts
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.topic_filter import Whitelist
from tests.support.audit_streams import ScriptedConnector
from tests.support.polling import wait_until


def records(n: int) -> list[ConsumerRecord]:
    return [ConsumerRecord("AuditCount", 0, offset, 0, None, b"%d" % offset, ()) for offset in range(n)]


def reader(tmp_path, connector, handle, skipped=None) -> ClusterReader:
    counts = CheckpointedCounts(tmp_path / "dc1-audit", 3_600_000, lambda: 0)
    return ClusterReader("dc1-audit", connector, Whitelist("AuditCount"), counts, handle, checkpoint_s=0.01,
                         on_skip=None if skipped is None else lambda name, reason: skipped.append((name, reason)),
                         retry_backoff_s=(0.01, 0.05))


def test_a_record_that_cannot_be_counted_now_is_retried_in_place_and_nothing_after_it_is_counted_first(tmp_path):
    handled: list[int] = []
    attempts = {"n": 0}

    def handle(record: ConsumerRecord) -> None:
        if record.offset == 1 and attempts["n"] < 3:
            attempts["n"] += 1
            raise RetriableError("schema registry: cannot reach http://127.0.0.1:1")
        handled.append(record.offset)
    stop = threading.Event()
    one = reader(tmp_path, ScriptedConnector(records(3)), handle).start(stop)
    try:
        wait_until(lambda: handled == [0, 1, 2], 10, message="every record counted, in order")
        assert attempts["n"] == 3 and one.state() == "reading" and one.positions() == {("AuditCount", 0): 3}
    finally:
        stop.set()
        one.join(10)
    assert one.failure is None


def test_while_retrying_the_position_stays_before_the_record_and_the_health_says_so(tmp_path):
    stop = threading.Event()

    def handle(record: ConsumerRecord) -> None:
        if record.offset == 2:
            raise RetriableError("schema registry: cannot reach it")
    one = reader(tmp_path, connector := ScriptedConnector(records(4)), handle).start(stop)
    try:
        wait_until(lambda: one.state().startswith("retrying: AuditCount-0@2"), 10, message="retrying")
        # A checkpoint taken before the reader reached the record may be there first: wait for one at the record.
        wait_until(lambda: connector.committed and connector.committed[-1] == {("AuditCount", 0): 2}, 10,
                   message=lambda: f"a checkpoint at the record while retrying (commits: {connector.committed})")
        assert one.positions() == {("AuditCount", 0): 2}
    finally:
        stop.set()
        one.join(10)
    assert one.failure is None and one.positions() == {("AuditCount", 0): 2}


def test_a_record_that_can_never_be_counted_is_skipped_counted_and_logged_with_its_place(tmp_path, caplog):
    skipped: list[tuple[str, str]] = []
    handled: list[int] = []

    def handle(record: ConsumerRecord) -> None:
        if record.offset == 1:
            raise UnreadableRecord("unknown schema id", "schema id 99999: Schema not found")
        handled.append(record.offset)
    stop = threading.Event()
    with caplog.at_level(logging.WARNING, logger="audit.readers"):
        one = reader(tmp_path, ScriptedConnector(records(3)), handle, skipped).start(stop)
        try:
            wait_until(lambda: one.positions() == {("AuditCount", 0): 3}, 10, message="read past the record")
        finally:
            stop.set()
            one.join(10)
    assert handled == [0, 2] and skipped == [("dc1-audit", "unknown schema id")] and one.skipped == 1
    assert "skipped AuditCount-0@1, it can never be counted (unknown schema id)" in caplog.text


def test_anything_else_stops_the_reader_and_the_service_with_the_failure_recorded(tmp_path):
    def handle(record: ConsumerRecord) -> None:
        if record.offset == 1:
            raise RuntimeError("a bug")
    stop = threading.Event()
    one = reader(tmp_path, connector := ScriptedConnector(records(3)), handle).start(stop)
    assert stop.wait(10), "the service is told to stop"
    one.join(10)
    assert isinstance(one.failure, RuntimeError) and one.state() == "stopped: a bug"
    assert one.positions() == {("AuditCount", 0): 1} and connector.shut


def test_past_the_markers_after_its_last_record_a_caught_up_reader_stands_at_the_last_stable_offset(tmp_path):
    handled: list[int] = []
    stop = threading.Event()
    connector = ScriptedConnector(records(3), passed={("AuditCount", 0): 5})
    one = reader(tmp_path, connector, lambda record: handled.append(record.offset)).start(stop)
    try:
        wait_until(lambda: one.positions() == {("AuditCount", 0): 5}, 10, message="the position past the markers")
        wait_until(lambda: connector.committed and connector.committed[-1] == {("AuditCount", 0): 5}, 10,
                   message="checkpointed there")
        assert handled == [0, 1, 2]
    finally:
        stop.set()
        one.join(10)
    assert one.failure is None
