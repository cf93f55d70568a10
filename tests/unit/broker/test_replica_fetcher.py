"""ReplicaFetcherManager's bookkeeping without a leader to fetch from (the fetcher threads are not started): which
thread copies a partition, threads shared per leader and fetcher index, idle threads retired, the largest lag."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.metadata import BrokerEndpoint
from broker.replica_fetcher import FetcherSettings, PartitionFetchState, ReplicaFetcherManager, ReplicaFetcherThread

LEADER_1 = BrokerEndpoint(1, "127.0.0.1", 9001)
LEADER_2 = BrokerEndpoint(2, "127.0.0.1", 9002)


@pytest.fixture
def fetchers(monkeypatch: pytest.MonkeyPatch) -> ReplicaFetcherManager:
    monkeypatch.setattr(ReplicaFetcherThread, "start", lambda self: None)
    monkeypatch.setattr(ReplicaFetcherThread, "join", lambda self, timeout=None: None)
    return ReplicaFetcherManager(FetcherSettings(broker_id=3, fetchers_per_broker=2))


def state(topic: str, partition: int, log_end_offset: int = 0, leader_high_watermark: int = -1) -> PartitionFetchState:
    fetch_state = PartitionFetchState((topic, partition), SimpleNamespace(log_end_offset=log_end_offset), 0)
    fetch_state.leader_high_watermark = leader_high_watermark
    return fetch_state


def test_a_new_partition_truncates_first_and_lags_by_what_the_leader_had_beyond_its_log() -> None:
    fresh = state("t", 0, log_end_offset=10, leader_high_watermark=25)
    assert fresh.truncating and fresh.lag == 15
    assert state("t", 0, log_end_offset=30, leader_high_watermark=25).lag == 0


def test_partitions_are_copied_by_a_thread_per_leader_and_fetcher_index(fetchers: ReplicaFetcherManager) -> None:
    states = [state("t", p) for p in range(6)]
    fetchers.add_partitions(LEADER_1, states)
    fetchers.add_partitions(LEADER_2, [state("u", 0)])
    assert {fetchers.fetching_from(("t", p)) for p in range(6)} == {LEADER_1}
    assert fetchers.fetching_from(("u", 0)) == LEADER_2 and fetchers.fetching_from(("v", 0)) is None
    threads = {key: thread for key, thread in fetchers._threads.items()}
    assert {leader for leader, _ in threads} == {LEADER_1, LEADER_2}
    assert all(index in (0, 1) for _, index in threads)
    assert sum(thread.partition_count() for thread in threads.values()) == 7
    for (leader, index), thread in threads.items():
        assert all(hash(s.key) % 2 == index for s in thread.states())
        assert thread.name == f"replica-fetcher-{index}-broker-{leader.broker_id}"


def test_a_partition_moved_to_another_leader_leaves_its_old_thread_which_retires_when_idle(
        fetchers: ReplicaFetcherManager) -> None:
    fetchers.add_partitions(LEADER_1, [state("t", 0)])
    (old,) = fetchers._threads.values()
    fetchers.add_partitions(LEADER_2, [state("t", 0)])
    assert fetchers.fetching_from(("t", 0)) == LEADER_2
    assert old.partition_count() == 0 and old._stopped and all(t is not old for t in fetchers._threads.values())
    fetchers.remove_partitions([("t", 0), ("never", 1)])
    assert fetchers.fetching_from(("t", 0)) is None and not fetchers._threads


def test_the_largest_lag_of_any_followed_partition(fetchers: ReplicaFetcherManager) -> None:
    assert fetchers.max_lag() == 0
    fetchers.add_partitions(LEADER_1, [state("t", 0, 5, 9), state("t", 1, 0, 100)])
    fetchers.add_partitions(LEADER_2, [state("u", 0, 50, 60)])
    assert fetchers.max_lag() == 100
    fetchers.shutdown()
    assert fetchers.max_lag() == 0 and fetchers.fetching_from(("t", 0)) is None
