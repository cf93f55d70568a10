"""The controller's round-robin replica assignment."""

from __future__ import annotations

from collections import Counter

import pytest

from broker.cluster.controller import assign_replicas


def test_partitions_go_round_robin_over_the_live_brokers():
    assignment = assign_replicas([3, 1, 2], 12, 1)
    assert [assignment[p] for p in range(4)] == [[1], [2], [3], [1]]
    assert Counter(r[0] for r in assignment.values()) == {1: 4, 2: 4, 3: 4}


def test_the_start_index_rotates_the_first_replica():
    assert assign_replicas([1, 2, 3], 2, 1, start=2) == {0: [3], 1: [1]}


def test_replicas_of_one_partition_are_distinct_consecutive_brokers():
    assignment = assign_replicas([1, 2, 3, 4], 4, 3)
    assert assignment[0] == [1, 2, 3]
    assert assignment[3] == [4, 1, 2]
    assert all(len(set(r)) == 3 for r in assignment.values())


@pytest.mark.parametrize("factor", [0, 4])
def test_a_factor_outside_one_to_the_live_count_is_refused(factor):
    with pytest.raises(ValueError, match="replication factor"):
        assign_replicas([1, 2, 3], 3, factor)
