"""ZooKeeper for tests: one real server per test session, a fresh chroot per test, session expiry, and
pausing a server (SIGSTOP) to stand for a ZooKeeper that stopped answering.

Expiring a session the way kazoo's own test harness does: a second client joins the same session
(its id and password) and closes it, which ends the session on the server; the first client then sees
it expire, its ephemeral nodes vanish, and it must recover as after any expiry.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from typing import Iterator

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from pipeline.zk.server import ZooKeeperServer
from tests.support.polling import wait_until


def unique_chroot(prefix: str = "test") -> str:
    return f"/{prefix}-{uuid.uuid4().hex[:12]}"


def expire_session(client: KazooClient, timeout: float = 20.0) -> None:
    """End ``client``'s ZooKeeper session from the server side and wait until the client saw it."""
    lost = threading.Event()

    def listener(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client.add_listener(listener)
    session_id, password = client.client_id
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    intruder.start(timeout)
    intruder.stop()
    intruder.close()
    wait_until(lost.is_set, timeout, message="the client never saw its session expire")


@contextlib.contextmanager
def frozen(server: ZooKeeperServer) -> Iterator[None]:
    """SIGSTOP ``server`` for the block (connections stay open, nothing answers); SIGCONT whatever happens."""
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
