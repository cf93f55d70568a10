"""The controller's leadership decisions as pure functions of a partition's replicas, state and the live brokers.

Kafka's rules (its PartitionStateMachine's leader selectors): a leader is only ever elected from the ISR
unless unclean.leader.election.enable allows otherwise; a broker that is shutting down (controlled
shutdown) is never elected and leaves every ISR, but keeps a leadership nobody else can take; a follower
that dies leaves the ISR without a new leader epoch. Every function returns the partition's next state,
or None when it stays as it is.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from broker.cluster.metadata_cache import NO_LEADER, PartitionState


def creation_state(replicas: list[int], live: set[int]) -> PartitionState:
    """A new partition's first state: every live replica in the ISR, the first of them the leader."""
    isr = tuple(r for r in replicas if r in live)
    return PartitionState(isr[0] if isr else NO_LEADER, 0, isr)


def next_state(replicas: list[int], state: PartitionState, live: set[int], shutting_down: set[int],
               unclean: bool) -> PartitionState | None:
    """The state after a broker change: dead or shutting-down followers leave the ISR; a dead leader (or one
    shutting down, when another ISR member can take over) is replaced from the ISR."""
    eligible = live - shutting_down
    if not state.isr and state.leader == NO_LEADER:
        # Never led (no replica was alive at creation): no data can be lost, start it as a new one.
        started = creation_state(replicas, eligible)
        return PartitionState(started.leader, state.leader_epoch + 1, started.isr) if started.isr else None
    if state.leader in live:
        isr = tuple(r for r in state.isr if r in eligible or r == state.leader)
        if state.leader in eligible:
            return None if isr == state.isr else PartitionState(state.leader, state.leader_epoch, isr)
        elected = elect_leader(replicas, state, eligible, unclean=False)
        if elected is None or elected.leader == NO_LEADER:
            # Nobody else in the ISR: the broker keeps leading until it stops (Kafka does the same).
            return None if isr == state.isr else PartitionState(state.leader, state.leader_epoch, isr)
        return elected
    if state.leader == NO_LEADER and not any(r in eligible for r in replicas):
        return None
    return elect_leader(replicas, state, eligible, unclean)


def elect_leader(replicas: list[int], state: PartitionState, eligible: set[int],
                 unclean: bool) -> PartitionState | None:
    """Kafka's OfflinePartitionLeaderSelector: the first replica (assignment order) that is eligible and in
    the ISR; else, with ``unclean``, the first eligible replica with an ISR of itself; else offline (leader
    -1, the ISR kept so that its last member is elected when it returns). None when nothing changes."""
    isr = [r for r in state.isr if r in eligible]
    leader = next((r for r in replicas if r in isr), None)
    if leader is not None:
        return PartitionState(leader, state.leader_epoch + 1, tuple(isr))
    if unclean:
        leader = next((r for r in replicas if r in eligible), None)
        if leader is not None:
            return PartitionState(leader, state.leader_epoch + 1, (leader,))
    if state.leader == NO_LEADER:
        return None
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr)


def preferred_state(replicas: list[int], state: PartitionState, eligible: set[int]) -> PartitionState | None:
    """Preferred replica election: the first replica leads when it is eligible and in the ISR."""
    preferred = replicas[0] if replicas else NO_LEADER
    if state.leader == preferred or preferred not in eligible or preferred not in state.isr:
        return None
    return PartitionState(preferred, state.leader_epoch + 1, state.isr)


def imbalanced_brokers(assignments: Iterable[tuple[list[int], PartitionState | None]],
                       percentage: int) -> set[int]:
    """Brokers whose share of preferred partitions led by another broker exceeds ``percentage`` (Kafka's
    leader.imbalance.per.broker.percentage check)."""
    preferred: Counter[int] = Counter()
    elsewhere: Counter[int] = Counter()
    for replicas, state in assignments:
        if not replicas or state is None:
            continue
        preferred[replicas[0]] += 1
        if state.leader != replicas[0]:
            elsewhere[replicas[0]] += 1
    return {broker for broker, count in preferred.items() if elsewhere[broker] * 100 > percentage * count}


def is_offline(state: PartitionState | None, live: set[int]) -> bool:
    """A partition without a live leader (Kafka's OfflinePartitionsCount)."""
    return state is not None and state.leader not in live


def is_not_preferred(replicas: list[int], state: PartitionState | None) -> bool:
    """A partition led by another replica than its first (Kafka's PreferredReplicaImbalanceCount)."""
    return state is not None and bool(replicas) and state.leader != replicas[0]
