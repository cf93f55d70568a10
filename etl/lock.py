"""The ETL's lock in ZooKeeper: one run at a time per group, however many schedulers and `run`s share the cluster.

ZooKeeper's lock recipe at ``/etl/GROUP/lock``: every contender creates an ephemeral sequential node there, the
lowest sequence holds the lock and each other contender watches the one just below it. Every request is bounded
(:class:`~pipeline.zk.client.BoundedZooKeeper`) and waiting ends as soon as a stop event is set, so a service told
to stop while another run holds the lock exits at once.

Holding is tied to the ZooKeeper session the node was created in: while the connection is suspended the server
may already have expired the session and handed the lock to someone else, and once the session was lost it
certainly was. :meth:`EtlLock.held` is therefore False from the moment the connection drops, and stays False for
good once the session changed; the run asks it before publishing anything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from typing import Callable, Iterator, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState

from etl.config import EtlConfig
from pipeline.etl_runs import RunReport
from pipeline.zk.client import BoundedZooKeeper, connect

__all__ = ["EtlLock", "Job", "LockWaitInterrupted", "lock_path", "run_locked"]

log = logging.getLogger(__name__)

_SEQUENCE_DIGITS = 10  # ZooKeeper's suffix of a sequential node


def lock_path(group: str) -> str:
    """The lock's directory for ETL group ``group`` (relative to the cluster's chroot)."""
    return f"/etl/{group}/lock"


class LockWaitInterrupted(Exception):
    """The stop event was set before the lock was acquired."""


class Job(Protocol):
    """One ETL run, given a way to check that the lock is still ours (``etl.job.run_once`` behind a session)."""

    def __call__(self, config: EtlConfig, *, still_locked: Callable[[], bool]) -> RunReport: ...


class EtlLock:
    """The lock of one ETL group on one ZooKeeper client; acquire and release it as often as needed.

    ``owner`` is written into the contender's node (``host:pid`` by default) so that :meth:`holder` can say who
    holds the lock.
    """

    def __init__(self, client: KazooClient, group: str, *, owner: str | None = None, timeout_s: float = 10.0,
                 recheck_s: float = 2.0) -> None:
        self.client = client
        self.path = lock_path(group)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self._zk = BoundedZooKeeper(client, timeout_s)
        # Our nodes' names start with this, so that a node left behind (a create whose answer was lost, a
        # release that failed) is recognised as ours and deleted instead of queued behind.
        self._prefix = f"{uuid.uuid4().hex}-lock-"
        self._recheck_s = recheck_s
        self._node: str | None = None
        self._session: tuple[int, bytes] | None = None  # the client id the node was created in
        self._acquired = False
        self._leftover: str | None = None  # our node a failed delete left behind in a session still alive
        client.add_listener(self._on_state)

    # -- holding --------------------------------------------------------------------------------------------

    def held(self) -> bool:
        """True while the lock is ours: acquired, not released, and the session that holds it connected."""
        return self._acquired and self._session is not None and self.client.client_id == self._session

    def holder(self) -> str | None:
        """The owner written by whoever holds the lock now (None: nobody)."""
        contenders = self._contenders()
        if not contenders:
            return None
        try:
            data, _ = self._zk.get(f"{self.path}/{contenders[0]}")
        except NoNodeError:
            return None
        return data.decode("utf-8", "replace")

    def _on_state(self, state: str) -> None:
        # kazoo's thread: nothing here may block.
        if state == KazooState.CONNECTED:
            leftover, self._leftover = self._leftover, None
            if leftover is not None:  # the session survived the disconnection, and with it the node
                self.client.delete_async(leftover)
        elif state == KazooState.LOST:
            self._leftover = None  # gone with its session
        if self._acquired and state != KazooState.CONNECTED:
            log.warning("the ETL lock %s may be lost: ZooKeeper session %s", self.path,
                        "expired" if state == KazooState.LOST else "suspended")

    # -- acquiring and releasing ----------------------------------------------------------------------------

    def acquire(self, stop: threading.Event, retry_s: float = 1.0) -> bool:
        """Wait until the lock is ours (True) or ``stop`` is set (False, and no node of ours is left queued).

        ZooKeeper errors (connection lost, a slow server, an expired session) are logged and retried until
        ``stop`` is set.
        """
        if self._acquired:
            raise RuntimeError(f"the ETL lock {self.path} is already held by this process")
        while not stop.is_set():
            try:
                if self._wait_for_turn(stop):
                    self._acquired = True
                    return True
            except KazooException as error:
                log.warning("waiting for the ETL lock %s: %s; retrying", self.path, str(error) or type(error).__name__)
                stop.wait(retry_s)
        self._withdraw()
        return False

    def release(self) -> None:
        """Give the lock up. A node that cannot be deleted now (ZooKeeper unreachable) is deleted as soon as the
        client reconnects in the same session, or goes with the session."""
        self._acquired = False
        self._withdraw()

    @contextlib.contextmanager
    def holding(self, stop: threading.Event) -> Iterator["EtlLock"]:
        """The lock held for the block; LockWaitInterrupted when ``stop`` is set while waiting for it."""
        if not self.acquire(stop):
            raise LockWaitInterrupted(f"stopped while waiting for the ETL lock {self.path}")
        try:
            yield self
        finally:
            self.release()

    def close(self) -> None:
        """Release the lock if held and stop following the client's state."""
        self.release()
        self.client.remove_listener(self._on_state)

    def _wait_for_turn(self, stop: threading.Event) -> bool:
        """Queue a node if we have none in this session; True once it is the lowest, False when stopped."""
        if self._node is None or self.client.client_id != self._session:
            self._enqueue()
        assert self._node is not None
        name = self._node.rsplit("/", 1)[1]
        while not stop.is_set():
            contenders = self._contenders()
            if name not in contenders:  # the session that held it ended: queue again
                self._enqueue()
                name = self._node.rsplit("/", 1)[1]
                continue
            position = contenders.index(name)
            if position == 0:
                return True
            turn = threading.Event()
            if self._zk.exists(f"{self.path}/{contenders[position - 1]}", watch=lambda _event: turn.set()) is None:
                continue
            # kazoo drops watches when the connection drops: look again now and then whatever happens.
            deadline = time.monotonic() + self._recheck_s
            while not turn.is_set() and not stop.is_set() and time.monotonic() < deadline:
                turn.wait(0.1)
        return False

    def _enqueue(self) -> None:
        self._delete_own_leftovers()
        self._zk.ensure_path(self.path)
        # The session before the create: had it changed in between, held() would say False, never a wrong True.
        session = self.client.client_id
        self._node = self._zk.sync("create", f"{self.path}/{self._prefix}", self.owner.encode(), ephemeral=True,
                                   sequence=True)
        self._session = session

    def _contenders(self) -> list[str]:
        try:
            children = self._zk.get_children(self.path)
        except NoNodeError:
            return []
        return sorted((c for c in children if c[-_SEQUENCE_DIGITS:].isdigit()), key=lambda c: c[-_SEQUENCE_DIGITS:])

    def _delete_own_leftovers(self) -> None:
        for child in self._contenders():
            if child.startswith(self._prefix):
                try:
                    self._zk.delete(f"{self.path}/{child}")
                except NoNodeError:
                    pass

    def _withdraw(self) -> None:
        node, self._node, self._session = self._node, None, None
        if node is None:
            return
        # Set before trying, so that a reconnection racing with the failure still deletes it.
        self._leftover = node
        try:
            self._zk.delete(node)
        except NoNodeError:
            pass
        except KazooException as error:
            log.warning("could not delete the ETL lock node %s (%s): deleted once reconnected, or gone with the "
                        "session", node, str(error) or type(error).__name__)
            return
        if self._leftover == node:
            self._leftover = None


def run_locked(config: EtlConfig, job: Job, stop: threading.Event, *, client: KazooClient | None = None,
               lock: EtlLock | None = None) -> RunReport | None:
    """One run under the ETL lock of ``config``'s group: wait for the lock (None when ``stop`` is set first),
    run ``job(config, still_locked=lock.held)``, release the lock whatever the run did.

    Connects to ``zookeeper.connect`` for the call unless a client (or a lock on one) is given.
    """
    own_client = client is None and lock is None
    if lock is None:
        if client is None:
            client = connect(config["zookeeper.connect"], security=config.zookeeper_security)
        lock = EtlLock(client, config["group.id"])
    try:
        with lock.holding(stop):
            return job(config, still_locked=lock.held)
    except LockWaitInterrupted:
        return None
    finally:
        if own_client:
            lock.close()
            lock.client.stop()
            lock.client.close()
