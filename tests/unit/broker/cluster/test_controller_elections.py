"""The controller's pure leadership decisions: creation, elections from the ISR, controlled shutdown,
preferred replicas, the imbalance check and reassignment steps."""

from __future__ import annotations

import pytest

from broker.cluster.controller import ControllerSettings
from broker.cluster.elections import (creation_state, imbalanced_brokers, is_not_preferred, is_offline, next_state,
                                      preferred_state)
from broker.cluster.metadata_cache import PartitionState
from broker.cluster.reassignment import ReassignmentStep, reassignment_step, valid_target
from broker.config import KafkaConfig

S = PartitionState


def test_a_new_partition_has_every_live_replica_in_its_isr():
    assert creation_state([2, 3, 1], {1, 2, 3}) == S(2, 0, (2, 3, 1))
    assert creation_state([2, 3, 1], {1, 3}) == S(3, 0, (3, 1))
    assert creation_state([2], set()) == S(-1, 0, ())


def test_a_live_leader_with_all_followers_alive_is_left_alone():
    assert next_state([1, 2, 3], S(1, 4, (1, 2, 3)), {1, 2, 3}, set(), unclean=False) is None


def test_a_dead_follower_leaves_the_isr_with_the_same_leader_epoch():
    assert next_state([1, 2, 3], S(1, 4, (1, 2, 3)), {1, 3}, set(), unclean=False) == S(1, 4, (1, 3))


def test_a_dead_leader_is_replaced_by_the_first_isr_member_in_assignment_order():
    # 3 is before 2 in the ISR but after it in the assignment.
    assert next_state([1, 2, 3], S(1, 4, (1, 3, 2)), {2, 3}, set(), unclean=False) == S(2, 5, (3, 2))


def test_a_live_replica_outside_the_isr_is_never_elected_cleanly():
    offline = next_state([1, 2, 3], S(1, 4, (1,)), {2, 3}, set(), unclean=False)
    assert offline == S(-1, 5, (1,))
    # Nothing to do while it stays so, and its last ISR member gets it back.
    assert next_state([1, 2, 3], offline, {2, 3}, set(), unclean=False) is None
    assert next_state([1, 2, 3], offline, {1, 2, 3}, set(), unclean=False) == S(1, 6, (1,))


def test_unclean_election_takes_the_first_live_replica_alone():
    assert next_state([1, 2, 3], S(1, 4, (1,)), {2, 3}, set(), unclean=True) == S(2, 5, (2,))
    assert next_state([1, 2, 3], S(-1, 5, (1,)), {3}, set(), unclean=True) == S(3, 6, (3,))


def test_a_partition_whose_replicas_all_died_goes_offline_once():
    offline = next_state([1, 2], S(1, 0, (1, 2)), set(), set(), unclean=True)
    assert offline == S(-1, 1, (1, 2))
    assert next_state([1, 2], offline, set(), set(), unclean=True) is None


def test_a_partition_never_led_starts_like_a_new_one_when_a_replica_comes():
    assert next_state([1, 2], S(-1, 0, ()), {2}, set(), unclean=False) == S(2, 1, (2,))
    assert next_state([1, 2], S(-1, 0, ()), set(), set(), unclean=False) is None


def test_controlled_shutdown_moves_leadership_and_leaves_the_isrs():
    assert next_state([1, 2, 3], S(1, 4, (1, 2, 3)), {1, 2, 3}, {1}, unclean=False) == S(2, 5, (2, 3))
    assert next_state([2, 1, 3], S(2, 4, (2, 1, 3)), {1, 2, 3}, {1}, unclean=False) == S(2, 4, (2, 3))


def test_a_shutting_down_leader_with_nobody_else_in_sync_keeps_leading():
    assert next_state([1, 2], S(1, 4, (1,)), {1, 2}, {1}, unclean=False) is None
    assert next_state([1], S(1, 4, (1,)), {1}, {1}, unclean=True) is None


def test_a_shutting_down_broker_is_never_elected():
    assert next_state([1, 2, 3], S(3, 4, (1, 2, 3)), {1, 2}, {1}, unclean=False) == S(2, 5, (2,))


def test_preferred_election_needs_the_first_replica_live_and_in_sync():
    assert preferred_state([1, 2], S(2, 3, (2, 1)), {1, 2}) == S(1, 4, (2, 1))
    assert preferred_state([1, 2], S(2, 3, (2,)), {1, 2}) is None
    assert preferred_state([1, 2], S(2, 3, (2, 1)), {2}) is None
    assert preferred_state([1, 2], S(1, 3, (2, 1)), {1, 2}) is None


def test_imbalance_is_the_share_of_a_brokers_preferred_partitions_led_elsewhere():
    partitions = [([1, 2], S(2, 1, (1, 2))), ([1, 2], S(1, 0, (1, 2))), ([2, 1], S(2, 0, (1, 2))),
                  ([2, 1], S(2, 0, (1, 2))), ([3, 1], None)]
    assert imbalanced_brokers(partitions, 10) == {1}
    assert imbalanced_brokers(partitions, 50) == set()


def test_partition_counts_for_the_metrics():
    assert is_offline(S(-1, 1, (1,)), {1}) and is_offline(S(2, 1, (2,)), {1}) and not is_offline(S(1, 0, (1,)), {1})
    assert is_not_preferred([1, 2], S(2, 1, (2,))) and not is_not_preferred([1, 2], S(1, 1, (1,)))


def test_a_reassignment_first_adds_the_new_replicas_then_waits_for_them_to_be_in_sync():
    step = reassignment_step([1, 2], [3, 2], S(1, 5, (1, 2)), {1, 2, 3})
    assert step == ReassignmentStep(replicas=[3, 2, 1])
    assert reassignment_step([3, 2, 1], [3, 2], S(1, 5, (1, 2)), {1, 2, 3}) == ReassignmentStep()


def test_a_reassignment_moves_leadership_to_a_new_replica_and_shrinks_the_isr():
    step = reassignment_step([3, 2, 1], [3, 2], S(1, 5, (1, 2, 3)), {1, 2, 3})
    assert step == ReassignmentStep([3, 2], S(3, 6, (2, 3)), done=True)


def test_a_reassignment_keeps_a_leader_that_stays():
    assert (reassignment_step([1, 2, 3], [1, 2], S(1, 5, (1, 2, 3)), {1, 2, 3})
            == ReassignmentStep([1, 2], S(1, 5, (1, 2)), done=True))
    assert reassignment_step([1, 2], [1, 2], S(1, 5, (1, 2)), {1, 2}) == ReassignmentStep(done=True)


@pytest.mark.parametrize("target", [[], [1, 1], [1, 4]])
def test_a_reassignment_target_must_be_distinct_live_brokers(target):
    assert not valid_target(target, {1, 2, 3}, [1])


def test_a_new_replica_that_died_after_it_was_added_is_still_a_valid_target():
    assert valid_target([4, 2], {1, 2}, [4, 2, 1])


def test_the_controller_settings_come_from_the_broker_properties():
    assert ControllerSettings.from_config(KafkaConfig()) == ControllerSettings(False, True, 300.0, 10)
    config = KafkaConfig({"unclean.leader.election.enable": "true", "auto.leader.rebalance.enable": "false",
                          "leader.imbalance.check.interval.seconds": "5",
                          "leader.imbalance.per.broker.percentage": "20"})
    assert ControllerSettings.from_config(config) == ControllerSettings(True, False, 5.0, 20)
