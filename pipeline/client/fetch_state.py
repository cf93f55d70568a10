"""The fetch state of consumed partitions, and what each fetch result does to it: one machine for all consumers.

A :class:`FetchPosition` is one partition being fetched: the offset its next fetch starts at (None until
looked up with ListOffsets at ``start_time``), the bytes it asks for, and until when it is paused.
:class:`FetchStateMachine` holds the rules, as pure logic: which positions may be fetched now, and what a
partition's :class:`~pipeline.client.simple_consumer.MessageSet` means -- deliver it and move on, grow
the fetch size (a batch did not fit), restart per auto.offset.reset (offset out of range), pause this
partition alone for refresh.leader.backoff.ms (a retriable error, no leader), or fail it. A leaderless or
erroring partition never holds up the others. :mod:`pipeline.client.partition_fetcher` does the I/O
around it for both the Consumer and the high-level consumer's fetcher.
"""

from __future__ import annotations

import enum
import time
from typing import Callable, Iterable

from pipeline.client.errors import KafkaClientError, OffsetOutOfRange
from pipeline.client.simple_consumer import EARLIEST_TIME, LATEST_TIME, MessageSet, MessageSizeTooLarge
from pipeline.config import Config
from pipeline.protocol.errors import KafkaProtocolError

__all__ = ["FetchOutcome", "FetchPosition", "FetchStateMachine", "reset_time"]

_RESET_TIMES = {"smallest": EARLIEST_TIME, "earliest": EARLIEST_TIME, "largest": LATEST_TIME, "latest": LATEST_TIME}


def reset_time(policy: str) -> int | None:
    """The ListOffsets time of an auto.offset.reset policy (None for "none": no restart allowed)."""
    return _RESET_TIMES.get(policy)


class FetchOutcome(enum.Enum):
    """What a fetch result did to its partition."""

    DELIVER = "deliver"  # records to hand out; the position moved past them
    NOTHING = "nothing"  # nothing new (or the fetch size grew): fetch again at once
    RESTART = "restart"  # offset out of range: the position moved per auto.offset.reset
    PAUSE = "pause"  # retriable error: paused for the backoff; its leader may have moved
    FAIL = "fail"  # an error the reader must see


class FetchPosition:
    """One partition's fetch state; the consumers' partition records extend it."""

    __slots__ = ("topic", "partition", "fetch_offset", "fetch_size", "retry_at", "start_time")

    def __init__(self, topic: str, partition: int, fetch_offset: int | None, fetch_size: int,
                 start_time: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        #: Where the next fetch starts; None until looked up at ``start_time`` (EARLIEST/LATEST_TIME).
        self.fetch_offset = fetch_offset
        self.fetch_size = fetch_size
        self.start_time = start_time
        #: Not fetched before this time.monotonic() value (a pause; infinity once failed).
        self.retry_at = 0.0


class FetchStateMachine:
    """The rules shared by every consumer: readiness, pauses, and the meaning of each fetch result."""

    def __init__(self, *, fetch_size: int, max_fetch_size: int, backoff_s: float, reset: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fetch_size = fetch_size
        self.max_fetch_size = max_fetch_size
        self.backoff_s = backoff_s
        self.reset = reset
        self.clock = clock

    @classmethod
    def from_config(cls, config: Config) -> "FetchStateMachine":
        """The machine a consumer's fetch.message.max.bytes, fetch.max.bytes, refresh.leader.backoff.ms and
        auto.offset.reset ask for."""
        return cls(fetch_size=config["fetch.message.max.bytes"], max_fetch_size=config["fetch.max.bytes"],
                   backoff_s=config["refresh.leader.backoff.ms"] / 1000, reset=config["auto.offset.reset"])

    def ready(self, positions: Iterable[FetchPosition]) -> tuple[list[FetchPosition], float | None]:
        """The positions that may be fetched now, and the earliest time a paused one may (None: none is)."""
        now = self.clock()
        ready = []
        wake: float | None = None
        for position in positions:
            retry_at = position.retry_at
            if retry_at <= now:
                ready.append(position)
            elif wake is None or retry_at < wake:
                wake = retry_at
        return ready, wake

    def pause(self, position: FetchPosition) -> None:
        """Leave ``position`` alone for the backoff (no leader, leader unreachable, retriable error)."""
        position.retry_at = self.clock() + self.backoff_s

    def fail(self, position: FetchPosition) -> None:
        """Fetch ``position`` no more (its reader got an error it must act on)."""
        position.retry_at = float("inf")

    def start_unknown(self, position: FetchPosition) -> KafkaClientError | None:
        """Before looking up where ``position`` starts: the error to fail it with when it may not be."""
        if position.start_time is None:
            return KafkaClientError(f"{position.topic}-{position.partition} has no committed offset and "
                                    f"auto.offset.reset is none")
        return None

    def take(self, position: FetchPosition, result: MessageSet) -> tuple[FetchOutcome, BaseException | None]:
        """Apply one fetch result to ``position``: the outcome and, for FAIL, the error to report."""
        error = result.error
        if error is not None:
            if isinstance(error, OffsetOutOfRange):
                return self._out_of_range(position, error)
            if isinstance(error, KafkaProtocolError) and error.retriable:
                self.pause(position)
                return FetchOutcome.PAUSE, None
            return FetchOutcome.FAIL, error
        if result.truncated:
            if position.fetch_size >= self.max_fetch_size:
                return FetchOutcome.FAIL, MessageSizeTooLarge(position.topic, position.partition, result.offset,
                                                              self.max_fetch_size)
            position.fetch_size = min(2 * position.fetch_size, self.max_fetch_size)
            return FetchOutcome.NOTHING, None
        position.fetch_size = self.fetch_size
        if result.next_offset == result.offset:
            return FetchOutcome.NOTHING, None
        position.fetch_offset = result.next_offset
        # Delivered even without a batch to hand out (read_committed past control batches and aborted transactions
        # only): the reader's position moves past them too.
        return FetchOutcome.DELIVER, None

    def _out_of_range(self, position: FetchPosition, error: OffsetOutOfRange
                      ) -> tuple[FetchOutcome, BaseException | None]:
        when = reset_time(self.reset)
        if when is None:
            return FetchOutcome.FAIL, error
        known = error.log_start_offset if when == EARLIEST_TIME else error.high_watermark
        # Without the bound in the answer, it is looked up with ListOffsets before the next fetch.
        position.fetch_offset = known if known >= 0 else None
        position.start_time = when
        return FetchOutcome.RESTART, None
