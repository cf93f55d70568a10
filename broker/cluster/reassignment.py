"""Partition reassignment as pure steps (Kafka's procedure, one step per controller pass).

1. assignment := new + old (new replicas first, duplicates dropped): the new replicas start following;
2. wait until every new replica is in the ISR (leaders report ISR changes through ZooKeeper);
3. leader := the current one if it is a new replica, else the first new replica that is live and in the
   ISR (leader epoch + 1); ISR := ISR ∩ new; assignment := new; the request's entry is removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.cluster.metadata_cache import PartitionState


@dataclass(frozen=True)
class ReassignmentStep:
    """What the controller writes next for one partition: a replica list (None: unchanged), a state (None:
    unchanged); ``done`` when the request's entry is to be removed."""

    replicas: list[int] | None = None
    state: PartitionState | None = None
    done: bool = False


WAIT = ReassignmentStep()


def valid_target(target: list[int], live: set[int], current: list[int]) -> bool:
    """A target replica list: not empty, no duplicates, each broker live or already a replica (a new replica
    that dies once added is waited for, as one that is slow to catch up)."""
    return bool(target) and len(set(target)) == len(target) and set(target) <= live | set(current)


def reassignment_step(current: list[int], target: list[int], state: PartitionState | None,
                      eligible: set[int]) -> ReassignmentStep:
    """The next step of moving a partition from ``current`` to ``target`` (``eligible``: live brokers not
    shutting down)."""
    if current == target:
        return ReassignmentStep(done=True)
    if not set(target) <= set(current):
        return ReassignmentStep(replicas=target + [r for r in current if r not in target])
    if state is None or not set(target) <= set(state.isr):
        return WAIT
    isr = tuple(r for r in state.isr if r in target)
    if state.leader in target and state.leader in eligible:
        kept = None if isr == state.isr else PartitionState(state.leader, state.leader_epoch, isr)
        return ReassignmentStep(target, kept, done=True)
    leader = next((r for r in target if r in isr and r in eligible), None)
    if leader is None:
        return WAIT
    return ReassignmentStep(target, PartitionState(leader, state.leader_epoch + 1, isr), done=True)
