"""The idempotent producer's bookkeeping: its producer id and epoch, and each partition's next sequence number.

This is the part of Kafka's TransactionManager an idempotent producer (without transactions) uses. The id
comes from InitProducerId; when a batch is sent for the first time (:meth:`Sender.send`, as Kafka numbers a
batch when it leaves the accumulator) it gets its partition's next sequence number, which then advances by the
batch's record count (wrapping at 2^31, as the broker expects). A batch that is never sent uses up no number. A
retried batch is resent as it was, with the same number, so the broker stores it once and answers with the
original offsets.

When a batch failed for good (retries exhausted, or an error no retry mends), nobody knows whether the broker
stored it, so the numbering of its partition may no longer match the broker's. The producer then starts over
with a new producer id (:meth:`IdempotenceState.reset`), which the broker accepts at sequence 0 -- what Kafka's
producer did before KIP-360 let it bump the epoch instead.
"""

from __future__ import annotations

import time
from typing import Callable

from pipeline.client.cluster import Cluster
from pipeline.client.errors import KafkaClientError, KafkaConnectionError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import KafkaProtocolError

__all__ = ["IdempotenceState", "NO_PRODUCER_ID"]

NO_PRODUCER_ID = -1
_SEQUENCE_MASK = 0x7FFFFFFF
# Sent in InitProducerId as Kafka's producer does; brokers ignore it without a transactional id.
_TRANSACTION_TIMEOUT_MS = 60000


class IdempotenceState:
    """Producer id, epoch and per-partition sequence numbers of one idempotent producer (one thread at a time)."""

    #: A TransactionManager (its subclass) says True: its batches carry the transactional bit.
    transactional = False

    def __init__(self, cluster: Cluster, *, retries: int, retry_backoff_s: float,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self._clock = clock
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._sleep = sleep
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self._sequences: dict[tuple[str, int], int] = {}

    def ensure_producer_id(self, deadline: float | None = None) -> None:
        """Get a producer id from any broker unless we hold one; retriable errors are retried ``retries`` times
        and, given a ``deadline`` (time.monotonic), not past it: the last error is raised then."""
        if self.producer_id != NO_PRODUCER_ID:
            return
        attempt = 0
        while True:
            try:
                response = self.cluster.any_connection().request(
                    ApiKey.INIT_PRODUCER_ID, {"transactional_id": None,
                                              "transaction_timeout_ms": _TRANSACTION_TIMEOUT_MS})
                if response["error_code"]:
                    raise KafkaProtocolError(response["error_code"], "InitProducerId")
                break
            except (KafkaClientError, KafkaProtocolError) as exc:
                if not getattr(exc, "retriable", False) or attempt >= self.retries or (
                        deadline is not None and self._clock() + self.retry_backoff_s >= deadline):
                    raise
                if isinstance(exc, KafkaConnectionError):
                    self.cluster.invalidate()
            attempt += 1
            self._sleep(self.retry_backoff_s)
        self._sequences.clear()
        self.producer_id = response["producer_id"]
        self.epoch = response["producer_epoch"]

    def sequence(self, topic: str, partition: int) -> int:
        """The sequence number the next batch for ``topic``-``partition`` carries."""
        return self._sequences.get((topic, partition), 0)

    def advance(self, topic: str, partition: int, count: int) -> None:
        """A batch of ``count`` records numbered from :meth:`sequence` is going to be sent."""
        key = (topic, partition)
        self._sequences[key] = (self._sequences.get(key, 0) + count) & _SEQUENCE_MASK

    def rewind(self, topic: str, partition: int, count: int) -> None:
        """A batch of ``count`` records numbered before was refused by the broker for good (never stored): the
        numbers after it move down by ``count``."""
        key = (topic, partition)
        self._sequences[key] = (self._sequences.get(key, 0) - count) & _SEQUENCE_MASK

    def on_send_failures(self, failures: list, unknown_outcome: bool) -> None:
        """Batches failed for good; when the broker may have stored one of them (``unknown_outcome``), number
        anew under a new producer id."""
        if unknown_outcome:
            self.reset()

    def reset(self) -> None:
        """Forget the producer id and every sequence number; the next batch gets a new id first."""
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self._sequences.clear()
