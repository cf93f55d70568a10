"""Connecting to ZooKeeper the way every component does: ``host:port[,host:port...]/chroot`` via kazoo.

The chroot is created if missing (a new cluster under /dc1 needs no manual step), then the client
is rooted there, so every path of :mod:`pipeline.zk.layout` is relative to the cluster.

kazoo's blocking calls wait for ever while the server is slow or gone (it queues requests while it
reconnects). :class:`BoundedZooKeeper` gives the reads and writes a client needs with a bound instead:
each waits at most its timeout for the answer, and fails at once while the client is not connected.
"""

from __future__ import annotations

from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat

DEFAULT_SESSION_TIMEOUT_S = 6.0


class ZooKeeperUnavailable(ConnectionError):
    """No ZooKeeper server of the connect string answered in time."""


def split_connect_string(connect: str) -> tuple[str, str]:
    """("host:port,host:port", "/chroot" or "") from a zookeeper.connect value."""
    connect = connect.strip()
    if not connect:
        raise ValueError("zookeeper.connect is empty")
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r} names no host")
    for host in hosts.split(","):
        name, sep, port = host.strip().rpartition(":")
        if not sep or not name or not port.isdigit():
            raise ValueError(f"zookeeper.connect {connect!r}: {host!r} is not host:port")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


def connect(connect_string: str, *, timeout_s: float = 15.0,
            session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S) -> KazooClient:
    """A started kazoo client rooted at the chroot of ``connect_string`` (created when missing)."""
    hosts, chroot = split_connect_string(connect_string)
    if chroot:
        bootstrap = KazooClient(hosts=hosts, timeout=session_timeout_s)
        try:
            bootstrap.start(timeout_s)
        except KazooTimeoutError:
            bootstrap.close()
            raise ZooKeeperUnavailable(f"no ZooKeeper server at {hosts} answered within {timeout_s:.0f}s") from None
        try:
            BoundedZooKeeper(bootstrap, timeout_s).ensure_path(chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()
    client = KazooClient(hosts=hosts + chroot, timeout=session_timeout_s)
    try:
        client.start(timeout_s)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailable(f"no ZooKeeper server at {hosts} answered within {timeout_s:.0f}s") from None
    return client


class ZooKeeperTimeout(KazooException):
    """A ZooKeeper request got no answer within its bound: the server is slow or unreachable."""


Watch = Callable[[Any], object]


class BoundedZooKeeper:
    """The requests of a started kazoo ``client``, each waiting at most ``timeout_s`` for its answer.

    A request made while the client is not connected (SUSPENDED, reconnecting) fails at once with
    ConnectionLoss; one that gets no answer in time raises :class:`ZooKeeperTimeout`. Both are
    KazooExceptions, as kazoo's own failures. A request that timed out may still be carried out once
    the connection is back: callers write only what stays correct when it lands late.
    """

    def __init__(self, client: KazooClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def _wait(self, start: Callable[..., IAsyncResult], what: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if not self.client.connected:
            raise ConnectionLoss(f"ZooKeeper {what} {path}: not connected")
        try:
            return start(path, *args, **kwargs).get(timeout=self.timeout_s)
        except KazooTimeoutError:
            raise ZooKeeperTimeout(f"ZooKeeper {what} {path}: no answer within {self.timeout_s:g}s") from None

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat]:
        return self._wait(self.client.get_async, "get", path, watch=watch)

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        return self._wait(self.client.get_children_async, "get_children", path, watch=watch)

    def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        return self._wait(self.client.exists_async, "exists", path, watch=watch)

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, makepath: bool = False) -> str:
        return self._wait(self.client.create_async, "create", path, value, ephemeral=ephemeral, makepath=makepath)

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return self._wait(self.client.set_async, "set", path, value, version=version)

    def delete(self, path: str, version: int = -1) -> None:
        self._wait(self.client.delete_async, "delete", path, version=version)

    def ensure_path(self, path: str) -> None:
        self._wait(self.client.ensure_path_async, "ensure_path", path)
