"""The fetch state machine shared by Consumer and ConsumerFetcher, as pure logic on MessageSets (no sockets)."""

from __future__ import annotations

import pytest

from pipeline.client.errors import KafkaClientError, OffsetOutOfRange
from pipeline.client.fetch_state import FetchOutcome, FetchPosition, FetchStateMachine
from pipeline.client.simple_consumer import EARLIEST_TIME, LATEST_TIME, MessageSet, MessageSizeTooLarge, read_message_set
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from tests.unit.pipeline.client.test_simple_consumer import batch, fetch_part


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def machine(reset: str = "smallest", clock: Clock | None = None) -> FetchStateMachine:
    return FetchStateMachine(fetch_size=512, max_fetch_size=2048, backoff_s=0.5, reset=reset,
                             clock=clock or Clock())


def result(records: bytes | None, offset: int, **part: object) -> MessageSet:
    return read_message_set("t", 0, offset, fetch_part(records, **part))  # type: ignore[arg-type]


def test_records_are_delivered_and_the_position_moves_past_them() -> None:
    position = FetchPosition("t", 0, 3, 512)
    outcome, error = machine().take(position, result(batch(0, 5), 3))
    assert (outcome, error, position.fetch_offset) == (FetchOutcome.DELIVER, None, 5)


def test_nothing_new_leaves_the_position_alone() -> None:
    position = FetchPosition("t", 0, 5, 512)
    assert machine().take(position, result(b"", 5, high_watermark=5)) == (FetchOutcome.NOTHING, None)
    assert position.fetch_offset == 5 and position.retry_at == 0.0


def test_a_batch_that_does_not_fit_doubles_the_fetch_size_up_to_the_maximum_then_fails() -> None:
    big = batch(0, 10, size=300)
    fsm = machine()
    position = FetchPosition("t", 0, 0, 512)
    sizes = []
    while True:
        outcome, error = fsm.take(position, result(big[:position.fetch_size], 0))
        if outcome is not FetchOutcome.NOTHING:
            break
        sizes.append(position.fetch_size)
    assert sizes == [1024, 2048]
    assert outcome is FetchOutcome.FAIL and isinstance(error, MessageSizeTooLarge)
    small = FetchPosition("t", 0, 0, 2048)
    assert fsm.take(small, result(batch(0, 2), 0))[0] is FetchOutcome.DELIVER
    assert small.fetch_size == 512, "a fetch that fits goes back to the configured size"


@pytest.mark.parametrize("reset,offset,start", [("smallest", 4, EARLIEST_TIME), ("largest", 9, LATEST_TIME)])
def test_out_of_range_restarts_per_auto_offset_reset(reset: str, offset: int, start: int) -> None:
    position = FetchPosition("t", 0, 1, 512)
    answer = result(None, 1, error=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=9, log_start=4)
    assert machine(reset).take(position, answer) == (FetchOutcome.RESTART, None)
    assert (position.fetch_offset, position.start_time) == (offset, start)


def test_out_of_range_without_bounds_is_looked_up_again_and_with_reset_none_fails() -> None:
    position = FetchPosition("t", 0, 1, 512)
    answer = result(None, 1, error=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=-1, log_start=-1)
    assert machine().take(position, answer)[0] is FetchOutcome.RESTART
    assert position.fetch_offset is None and position.start_time == EARLIEST_TIME
    strict = FetchPosition("t", 0, 1, 512)
    outcome, error = machine("none").take(strict, result(None, 1, error=ErrorCode.OFFSET_OUT_OF_RANGE))
    assert outcome is FetchOutcome.FAIL and isinstance(error, OffsetOutOfRange)


def test_a_retriable_error_pauses_only_its_partition_for_the_backoff() -> None:
    clock = Clock()
    fsm = machine(clock=clock)
    sick, healthy = FetchPosition("t", 0, 0, 512), FetchPosition("t", 1, 0, 512)
    answer = result(None, 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert fsm.take(sick, answer) == (FetchOutcome.PAUSE, None)
    assert fsm.ready([sick, healthy]) == ([healthy], 100.5)
    clock.now = 100.5
    assert fsm.ready([sick, healthy]) == ([sick, healthy], None)


def test_a_fatal_error_fails_and_a_failed_partition_is_never_ready_again() -> None:
    fsm = machine()
    position = FetchPosition("t", 0, 0, 512)
    outcome, error = fsm.take(position, result(None, 0, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    assert outcome is FetchOutcome.FAIL and isinstance(error, KafkaProtocolError)
    fsm.fail(position)
    assert fsm.ready([position]) == ([], float("inf"))


def test_an_unknown_start_needs_a_reset_policy() -> None:
    fsm = machine()
    assert fsm.start_unknown(FetchPosition("t", 0, None, 512, EARLIEST_TIME)) is None
    assert isinstance(fsm.start_unknown(FetchPosition("t", 0, None, 512)), KafkaClientError)
