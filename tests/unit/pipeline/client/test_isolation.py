"""read_committed filtering of Fetch answers (Kafka's consumer rules), pure logic on encoded batches."""

from __future__ import annotations

import pytest

from pipeline.client.consumer_config import ConsumerConfig
from pipeline.client.fetch_state import FetchOutcome, FetchPosition, FetchStateMachine
from pipeline.client.isolation import READ_COMMITTED, READ_UNCOMMITTED, committed_batches, parse_isolation_level
from pipeline.client.simple_consumer import fetch_request_body, FetchRequest, read_message_set
from pipeline.config import ConfigError
from pipeline.records import encode_batch
from pipeline.records.control import end_transaction_marker_batch


def data(base: int, values: list[bytes], pid: int = -1, compression: int = 0) -> bytes:
    return encode_batch(values, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=0 if pid >= 0 else -1, transactional=pid >= 0, compression=compression)


def marker(base: int, pid: int, committed: bool) -> bytes:
    return end_transaction_marker_batch(pid, 0, committed, 0, 1000, base_offset=base)


# offset 0 plain; 1-2 producer 10 (aborted at 4); 3 producer 11 (committed at 5); 6 producer 10 again
# (committed at 7); 8-9 producer 12, compressed (aborted at 10).
LOG = b"".join([data(0, [b"a"]), data(1, [b"t10-1", b"t10-2"], 10), data(3, [b"t11"], 11), marker(4, 10, False),
                marker(5, 11, True), data(6, [b"t10-3"], 10), marker(7, 10, True),
                data(8, [b"t12-1", b"t12-2"], 12, compression=1), marker(10, 12, False)])
ABORTED = [{"producer_id": 10, "first_offset": 1}, {"producer_id": 12, "first_offset": 8}]


def part(records: bytes, aborted: list | None = ABORTED) -> dict:
    return {"partition_index": 0, "error_code": 0, "high_watermark": 11, "last_stable_offset": 11,
            "log_start_offset": 0, "aborted_transactions": aborted, "records": records}


def values(result) -> list[bytes]:
    return [r.value for r in result]


def test_read_committed_skips_aborted_transactions_and_markers() -> None:
    result = read_message_set("t", 0, 0, part(LOG), READ_COMMITTED)
    assert values(result) == [b"a", b"t11", b"t10-3"]
    assert result.next_offset == 11 and result.last_stable_offset == 11


def test_read_uncommitted_hands_out_every_data_record_but_no_marker() -> None:
    result = read_message_set("t", 0, 0, part(LOG), READ_UNCOMMITTED)
    assert values(result) == [b"a", b"t10-1", b"t10-2", b"t11", b"t10-3", b"t12-1", b"t12-2"]
    assert result.next_offset == 11


def test_a_fetch_starting_inside_an_aborted_transaction_still_skips_it() -> None:
    result = read_message_set("t", 0, 2, part(LOG), READ_COMMITTED)
    assert values(result) == [b"t11", b"t10-3"]


def test_aborted_transactions_as_pairs_and_a_later_abort_of_the_same_producer() -> None:
    log = b"".join([data(0, [b"x"], 5), marker(1, 5, False), data(2, [b"y"], 5), marker(3, 5, True),
                    data(4, [b"z"], 5), marker(5, 5, False)])
    batches, next_offset, whole = committed_batches(log, 0, [(5, 0), (5, 4)])
    assert whole and next_offset == 6
    assert [header.base_offset for _, header in batches] == [2]


def test_only_skipped_batches_still_move_the_position() -> None:
    log = b"".join([data(20, [b"x", b"y"], 3), marker(22, 3, False)])
    result = read_message_set("t", 0, 20, part(log, [{"producer_id": 3, "first_offset": 20}]), READ_COMMITTED)
    assert values(result) == [] and result.next_offset == 23
    machine = FetchStateMachine(fetch_size=100, max_fetch_size=1000, backoff_s=0.1, reset="smallest")
    position = FetchPosition("t", 0, 20, 100)
    # Delivered (nothing to hand out), so that the reader's position moves past them too.
    assert machine.take(position, result) == (FetchOutcome.DELIVER, None)
    assert position.fetch_offset == 23


def test_an_open_transaction_without_an_aborted_entry_is_handed_out_as_the_broker_bounds_it() -> None:
    # The broker ends a read_committed answer at the LSO; what it sends without an aborted entry is committed.
    result = read_message_set("t", 0, 0, part(data(0, [b"c"], 4), []), READ_COMMITTED)
    assert values(result) == [b"c"]


def test_isolation_level_in_requests_and_config() -> None:
    body = fetch_request_body([FetchRequest("t", 0, 0, 10)], isolation_level=READ_COMMITTED)
    assert body["isolation_level"] == 1
    assert fetch_request_body([FetchRequest("t", 0, 0, 10)])["isolation_level"] == 0
    assert parse_isolation_level("read_committed") == 1 and parse_isolation_level("READ_UNCOMMITTED") == 0
    assert ConsumerConfig({"isolation.level": "read_committed"})["isolation.level"] == 1
    assert ConsumerConfig({})["isolation.level"] == 0
    with pytest.raises(ConfigError):
        ConsumerConfig({"isolation.level": "serializable"})
    with pytest.raises(ConfigError):
        ConsumerConfig({"isolation.level": 2})
