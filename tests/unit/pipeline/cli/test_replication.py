"""The replica lists `topics alter --replication-factor` asks for."""

from __future__ import annotations

import pytest

from pipeline.cli.replication import with_replication_factor


def test_growing_keeps_the_replicas_and_adds_the_brokers_after_the_first():
    assert with_replication_factor({0: [1], 1: [2], 2: [3]}, [3, 1, 2], 2) == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    assert with_replication_factor({0: [2, 3]}, [1, 2, 3], 3) == {0: [2, 3, 1]}


def test_shrinking_keeps_the_first_replicas():
    assert with_replication_factor({0: [3, 1, 2]}, [1, 2, 3], 1) == {0: [3]}


def test_a_replica_on_an_unregistered_broker_is_kept_and_others_are_added():
    assert with_replication_factor({0: [7]}, [1, 2], 2) == {0: [7, 1]}


@pytest.mark.parametrize("factor", [0, 4])
def test_a_factor_beyond_the_registered_brokers_is_refused(factor):
    with pytest.raises(ValueError, match="replication factor"):
        with_replication_factor({0: [1]}, [1, 2, 3], factor)
