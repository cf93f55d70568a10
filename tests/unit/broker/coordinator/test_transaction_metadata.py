"""TransactionMetadata: Kafka's state machine (every allowed and refused transition) and the stored form."""

from __future__ import annotations

import pytest

from broker.coordinator.transaction_metadata import (
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)

S = TransactionState


def test_the_allowed_transitions_are_kafkas() -> None:
    allowed = {(before, after) for after, befores in VALID_PREVIOUS_STATES.items() for before in befores}
    assert allowed == {
        (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
        (S.EMPTY, S.ONGOING), (S.ONGOING, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
        (S.ONGOING, S.PREPARE_COMMIT), (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
        (S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT),
        (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
        (S.ONGOING, S.PREPARE_EPOCH_FENCE),
    }


@pytest.mark.parametrize("before", list(S))
@pytest.mark.parametrize("after", list(S))
def test_transition_to_checks_the_state_machine(before: TransactionState, after: TransactionState) -> None:
    metadata = TransactionMetadata("t", 7, producer_epoch=3, state=before)
    if before in VALID_PREVIOUS_STATES[after]:
        moved = metadata.transition_to(after, producer_epoch=4)
        assert (moved.state, moved.producer_epoch, metadata.state, metadata.producer_epoch) == (after, 4, before, 3)
    else:
        with pytest.raises(IllegalTransition):
            metadata.transition_to(after)


def test_a_record_round_trips_and_prepare_epoch_fence_is_never_stored() -> None:
    metadata = TransactionMetadata("tx/1", 42, 41, 5, 4, 30000, S.ONGOING,
                                   frozenset({("a", 1), ("b", 0), ("a", 0)}), frozenset({"g"}), 1000, 2000, 3)
    assert TransactionMetadata.from_record("tx/1", metadata.to_record()) == metadata
    assert metadata.topics() == {"a": [0, 1], "b": [0]}
    with pytest.raises(ValueError):
        TransactionMetadata.from_record("t", {**metadata.to_record(), "state": "PrepareEpochFence"})


def test_an_epoch_is_exhausted_one_short_of_kafkas_short_max() -> None:
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766) and is_epoch_exhausted(32767)
