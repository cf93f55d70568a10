"""TransactionMetadata: what the transaction coordinator knows of one transactional id, and Kafka's state machine.

A transition never changes a TransactionMetadata in place: ``transition_to`` checks that Kafka allows it and
returns the new metadata, which the coordinator writes to its store before it replaces the old one (and before it
answers the request that caused it). PrepareEpochFence is never stored: it is the pending state of an Ongoing
transaction whose producer is being fenced, written as PrepareAbort with the bumped epoch (as Kafka does).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka's Short.MaxValue: an epoch at MAX_EPOCH - 1 or above is exhausted (the next bump takes a new producer id).
MAX_EPOCH = 32767


class TransactionState(enum.Enum):
    """Kafka's transaction states, by the names DescribeTransactions and ListTransactions give them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


S = TransactionState
#: Kafka's TransactionState.validPreviousStates.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
#: States in which no transaction is open: the id may take a new producer epoch or expire.
COMPLETED_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARE_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


class IllegalTransition(Exception):
    """A transition Kafka's state machine does not allow (a coordinator bug, never a client's doing)."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: the epoch cannot be bumped twice more (one fence, one init)."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata), as stored.

    ``groups`` are the consumer groups AddOffsetsToTxn added: the marker of their ``__consumer_offsets`` partition
    goes to each group's coordinator, which here is chosen per group, not per offsets partition.
    """

    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60000
    state: TransactionState = S.EMPTY
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    start_time_ms: int = -1
    last_update_time_ms: int = -1
    coordinator_epoch: int = 0

    def transition_to(self, state: TransactionState, **changes: Any) -> TransactionMetadata:
        """The metadata in ``state`` with ``changes``; IllegalTransition unless Kafka allows the move."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: {self.state.value} -> {state.value}")
        return replace(self, state=state, **changes)

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def to_record(self) -> dict[str, Any]:
        """The stored form (a JSON object)."""
        return {"version": 1, "producer_id": self.producer_id, "last_producer_id": self.last_producer_id,
                "producer_epoch": self.producer_epoch, "last_producer_epoch": self.last_producer_epoch,
                "timeout_ms": self.timeout_ms, "state": self.state.value,
                "partitions": sorted([t, p] for t, p in self.partitions), "groups": sorted(self.groups),
                "start_time_ms": self.start_time_ms, "last_update_time_ms": self.last_update_time_ms,
                "coordinator_epoch": self.coordinator_epoch}

    @classmethod
    def from_record(cls, transactional_id: str, record: dict[str, Any]) -> TransactionMetadata:
        """The metadata a stored record holds (ValueError, KeyError or TypeError when it is not one)."""
        state = TransactionState(record["state"])
        if state == S.PREPARE_EPOCH_FENCE:
            raise ValueError("PrepareEpochFence is never stored")
        return cls(transactional_id, int(record["producer_id"]), int(record["last_producer_id"]),
                   int(record["producer_epoch"]), int(record["last_producer_epoch"]), int(record["timeout_ms"]),
                   state, frozenset((str(t), int(p)) for t, p in record["partitions"]),
                   frozenset(str(g) for g in record.get("groups", ())), int(record["start_time_ms"]),
                   int(record["last_update_time_ms"]), int(record["coordinator_epoch"]))

    def topics(self) -> dict[str, list[int]]:
        """The partitions by topic, sorted (DescribeTransactions' and WriteTxnMarkers' layout)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return by_topic
