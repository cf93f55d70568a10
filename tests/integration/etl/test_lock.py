"""The ETL's ZooKeeper lock on a real ZooKeeper: exclusion, hand-over, interruptible waiting, and held() turning
False when the session holding it is suspended or expires."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from etl.config import EtlConfig
from etl.lock import EtlLock, LockWaitInterrupted, lock_path, run_locked
from pipeline.etl_runs import SUCCEEDED, RunReport
from pipeline.zk.client import connect
from pipeline.zk.server import ZooKeeperServer
from tests.support.polling import wait_until
from tests.support.zookeeper import expire_session, frozen

GROUP = "etl-test"


@pytest.fixture
def clients(zk_connect: str) -> Iterator[Callable[..., KazooClient]]:
    """Separate ZooKeeper sessions on the test's chroot, closed after the test."""
    made: list[KazooClient] = []

    def make(**kwargs: float) -> KazooClient:
        client = connect(zk_connect, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


class Waiter:
    """``lock.acquire(stop)`` on a thread of its own, its result kept."""

    def __init__(self, lock: EtlLock) -> None:
        self.lock = lock
        self.stop = threading.Event()
        self.result: bool | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.result = self.lock.acquire(self.stop)

    def finished(self) -> bool:
        return not self.thread.is_alive()


def test_one_holder_at_a_time_and_the_waiter_gets_it_on_release(clients: Callable[..., KazooClient]) -> None:
    first, second = EtlLock(clients(), GROUP, owner="first"), EtlLock(clients(), GROUP, owner="second")
    never = threading.Event()
    assert first.acquire(never)
    assert first.held() and first.holder() == "first"
    waiter = Waiter(second)
    wait_until(lambda: len(first.client.get_children(lock_path(GROUP))) == 2, message="the second contender queued")
    assert not waiter.finished() and not second.held()
    first.release()
    assert not first.held()
    wait_until(waiter.finished, message="the waiter acquiring the released lock")
    assert waiter.result is True and second.held() and second.holder() == "second"
    second.release()
    assert first.holder() is None


def test_stop_ends_the_wait_and_leaves_no_node_queued(clients: Callable[..., KazooClient]) -> None:
    holder, other = EtlLock(clients(), GROUP), EtlLock(clients(), GROUP)
    assert holder.acquire(threading.Event())
    waiter = Waiter(other)
    wait_until(lambda: len(holder.client.get_children(lock_path(GROUP))) == 2, message="the second contender queued")
    waiter.stop.set()
    wait_until(waiter.finished, timeout=3.0, message="the interrupted wait to end")
    assert waiter.result is False and not other.held()
    assert len(holder.client.get_children(lock_path(GROUP))) == 1
    with pytest.raises(LockWaitInterrupted):
        with other.holding(waiter.stop):
            pytest.fail("the block ran without the lock")


def test_an_expired_session_no_longer_holds_the_lock_and_another_takes_it(
        clients: Callable[..., KazooClient]) -> None:
    lost, other = EtlLock(clients(), GROUP), EtlLock(clients(), GROUP)
    assert lost.acquire(threading.Event())
    assert lost.held()
    expire_session(lost.client)
    assert not lost.held()
    wait_until(lambda: lost.client.connected, message="kazoo reconnecting with a new session")
    assert not lost.held(), "a new session does not hold the old session's lock"
    waiter = Waiter(other)
    wait_until(waiter.finished, message="the other contender taking the expired session's lock")
    assert waiter.result is True and other.held()
    lost.release()
    assert other.held()


def test_a_suspended_connection_does_not_count_as_holding_and_a_release_meanwhile_completes_on_reconnection(
        clients: Callable[..., KazooClient], zookeeper_server: ZooKeeperServer) -> None:
    # ZooKeeper negotiates at least 2 ticks (4 s): kazoo suspends after 2/3 of that, well before the session ends.
    lock, observer = EtlLock(clients(session_timeout_s=4.0), GROUP), clients()
    assert lock.acquire(threading.Event())
    session = lock.client.client_id
    with frozen(zookeeper_server):
        wait_until(lambda: not lock.held(), timeout=5.0, message="held() turning False while ZooKeeper is silent")
        lock.release()  # cannot reach ZooKeeper: the node stays while the session lives
    wait_until(lambda: lock.client.connected, message="kazoo reconnecting")
    assert lock.client.client_id == session, "the session survived"
    wait_until(lambda: observer.get_children(lock_path(GROUP)) == [],
               message="the node of the failed release deleted once reconnected")


def test_a_node_left_behind_by_a_failed_release_is_cleaned_at_the_next_acquire(
        clients: Callable[..., KazooClient]) -> None:
    client = clients()
    lock = EtlLock(client, GROUP)
    assert lock.acquire(threading.Event())
    leftover = lock._node
    lock._acquired, lock._node = False, None  # as after a delete that ZooKeeper never answered
    waiter = Waiter(lock)
    wait_until(waiter.finished, message="acquiring instead of queueing behind its own leftover")
    assert waiter.result is True
    assert client.exists(leftover) is None
    assert client.get_children(lock_path(GROUP)) == [lock._node.rsplit("/", 1)[1]]
    lock.release()


def test_run_locked_runs_the_job_holding_the_lock_then_releases_it(zk_connect: str, tmp_path: Path,
                                                                  clients: Callable[..., KazooClient]) -> None:
    config = EtlConfig({"zookeeper.connect": zk_connect, "warehouse.dir": str(tmp_path), "group.id": GROUP})
    seen: list[bool] = []

    def job(given: EtlConfig, *, still_locked: Callable[[], bool]) -> RunReport:
        seen.append(still_locked())
        report = RunReport(run_id="r1", group=given["group.id"], started_at=1.0)
        report.finish(SUCCEEDED, 2.0)
        return report

    report = run_locked(config, job, threading.Event())
    assert report is not None and report.run_id == "r1" and seen == [True]
    assert clients().get_children(lock_path(GROUP)) == []


def test_run_locked_gives_none_when_stopped_while_another_holds_the_lock(
        zk_connect: str, tmp_path: Path, clients: Callable[..., KazooClient]) -> None:
    config = EtlConfig({"zookeeper.connect": zk_connect, "warehouse.dir": str(tmp_path), "group.id": GROUP})
    holder = EtlLock(clients(), GROUP)
    assert holder.acquire(threading.Event())
    stop = threading.Event()
    result: list[RunReport | None] = []
    thread = threading.Thread(target=lambda: result.append(run_locked(config, _never_called, stop)), daemon=True)
    thread.start()
    wait_until(lambda: len(holder.client.get_children(lock_path(GROUP))) == 2, message="run_locked queued")
    stop.set()
    wait_until(lambda: not thread.is_alive(), timeout=5.0, message="run_locked to give up")
    assert result == [None]
    holder.release()


def _never_called(config: EtlConfig, *, still_locked: Callable[[], bool]) -> RunReport:
    raise AssertionError("the job ran without the lock")
