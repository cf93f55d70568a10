"""Connecting to ZooKeeper the way every component does: ``host:port[,host:port...]/chroot`` via kazoo.

The chroot is created if missing (a new cluster under /dc1 needs no manual step), then the client
is rooted there, so every path of :mod:`pipeline.zk.layout` is relative to the cluster. Given a
:class:`~pipeline.zk.security.ZooKeeperSecurity`, the client authenticates with its digest and creates every
znode (the chroot too) with the ACL that security gives the path.

kazoo's blocking calls wait for ever while the server is slow or gone (it queues requests while it
reconnects). :class:`BoundedZk` is the one mechanism that bounds them: every request is a kazoo async
request waited on for at most a deadline, on a thread or on the event loop, alone or many at once.
:class:`BoundedZooKeeper` is the same with the calls clients make by name, failing at once while the
client is not connected.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Iterable, TypeVar

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import ConnectionLoss, KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from pipeline.zk.handler import PollingHandler
from pipeline.zk.security import OPEN_ZOOKEEPER, ZooKeeperSecurity

DEFAULT_SESSION_TIMEOUT_S = 6.0


T = TypeVar("T")

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
        if not sep or not name or not (port.isascii() and port.isdigit()):
            raise ValueError(f"zookeeper.connect {connect!r}: {host!r} is not host:port")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


def watch_until(client: KazooClient, path: str, answer: Callable[[bytes | None, ZnodeStat | None], T | None],
                timeout_s: float) -> T | None:
    """Follow ``path``'s data with a watch until ``answer(data, stat)`` gives something other than None (it is
    called with None, None while the node does not exist) and return that; None after ``timeout_s``. Blocking:
    call it from a thread, not from an event loop."""
    found: list[T] = []
    done = threading.Event()

    def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
        if done.is_set():
            return False
        value = answer(data, stat)
        if value is None:
            return None
        found.append(value)
        done.set()
        return False
    DataWatch(client, path, on_data)
    done.wait(timeout_s)
    done.set()
    return found[0] if found else None


class SecuredKazooClient(KazooClient):
    """A kazoo client that creates each znode with the ACL its :class:`ZooKeeperSecurity` gives the path (unless
    the caller gives one), in single requests, ``ensure_path`` and transactions alike; never blocking the caller."""

    def __init__(self, *args: Any, security: ZooKeeperSecurity, **kwargs: Any) -> None:
        super().__init__(*args, auth_data=security.auth_data, **kwargs)
        self.security = security

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False, include_data: bool = False) -> IAsyncResult:
        def create() -> IAsyncResult:
            return super(SecuredKazooClient, self).create_async(
                path, value, acl=acl if acl is not None else self.security.acl_for(path), ephemeral=ephemeral,
                sequence=sequence, makepath=makepath and acl is not None, include_data=include_data)

        parent = path.rstrip("/").rsplit("/", 1)[0]
        if makepath and acl is None and parent:
            # kazoo would give the parents the child's ACL: each is created with its own first.
            return self._then(self.ensure_path_async(parent), create)
        return create()

    def ensure_path_async(self, path: str, acl: Any = None) -> IAsyncResult:
        if acl is not None or not self.security.set_acl:
            return super().ensure_path_async(path, acl)
        # One node at a time from the top, each with its own ACL (kazoo gives every node the same one).
        result: IAsyncResult | None = None
        parts = [p for p in path.split("/") if p]
        for depth in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:depth])

            def ensure(prefix: str = prefix) -> IAsyncResult:
                return super(SecuredKazooClient, self).ensure_path_async(prefix, self.security.acl_for(prefix))
            result = ensure() if result is None else self._then(result, ensure)
        return result if result is not None else super().ensure_path_async(path)

    def _then(self, first: IAsyncResult, second: Callable[[], IAsyncResult]) -> IAsyncResult:
        """An async result completed as ``second()``'s once ``first`` succeeded (or with ``first``'s error)."""
        done = self.handler.async_result()

        def forward(result: IAsyncResult) -> None:
            if result.successful():
                done.set(result.value)
            else:
                done.set_exception(result.exception)

        def after_first(result: IAsyncResult) -> None:
            if not result.successful():
                done.set_exception(result.exception)
                return
            try:
                second().rawlink(forward)
            except Exception as exc:  # a request that could not even be sent
                done.set_exception(exc)
        first.rawlink(after_first)
        return done

    def transaction(self) -> TransactionRequest:
        return _SecuredTransaction(self)


class _SecuredTransaction(TransactionRequest):
    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        security: ZooKeeperSecurity = self.client.security
        super().create(path, value, acl if acl is not None else security.acl_for(path), ephemeral, sequence)


def _client(hosts: str, session_timeout_s: float, security: ZooKeeperSecurity) -> KazooClient:
    if security == OPEN_ZOOKEEPER:
        return KazooClient(hosts=hosts, timeout=session_timeout_s, handler=PollingHandler())
    return SecuredKazooClient(hosts=hosts, timeout=session_timeout_s, security=security, handler=PollingHandler())


def connect(connect_string: str, *, timeout_s: float = 15.0,
            session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
            security: ZooKeeperSecurity = OPEN_ZOOKEEPER) -> KazooClient:
    """A started kazoo client rooted at the chroot of ``connect_string`` (created when missing), authenticated and
    creating znodes with ACLs as ``security`` says."""
    hosts, chroot = split_connect_string(connect_string)
    if chroot:
        bootstrap = _client(hosts, session_timeout_s, security)
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
    client = _client(hosts + chroot, session_timeout_s, security)
    try:
        client.start(timeout_s)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailable(f"no ZooKeeper server at {hosts} answered within {timeout_s:.0f}s") from None
    return client


class ZooKeeperTimeout(KazooException, TimeoutError):
    """A ZooKeeper request got no answer within its bound: the server is slow, stopped or unreachable."""


Watch = Callable[[Any], object]


class BoundedZk:
    """A kazoo client whose calls all end within a deadline (the broker's way to call ZooKeeper).

    ``sync`` / ``all`` wait on a thread; ``call`` / ``wait_async`` await on the event loop without holding
    a thread: the future is completed from kazoo's thread. A request that timed out may still be carried
    out once the connection is back: callers write only what stays correct when it lands late.
    """

    def __init__(self, client: KazooClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def _deadline(self, timeout_s: float | None) -> float:
        return self.timeout_s if timeout_s is None else max(0.0, min(timeout_s, self.timeout_s))

    def _request(self, operation: str, args: tuple, kwargs: dict) -> IAsyncResult:
        return getattr(self.client, f"{operation}_async")(*args, **kwargs)

    # -- threads ----------------------------------------------------------------------------------

    def wait(self, result: IAsyncResult, timeout_s: float | None = None) -> Any:
        """The outcome of one async request (its value, or its exception raised); ZooKeeperTimeout if late."""
        deadline = self._deadline(timeout_s)
        try:
            return result.get(timeout=deadline)
        except KazooTimeoutError:
            raise ZooKeeperTimeout(f"ZooKeeper did not answer within {deadline:.1f}s") from None

    def sync(self, operation: str, *args: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Run kazoo's ``<operation>_async`` (get, set, create, ...) and wait for it with the deadline."""
        return self.wait(self._request(operation, args, kwargs), timeout_s)

    def all(self, results: Iterable[IAsyncResult], timeout_s: float | None = None) -> list[Any]:
        """Outcomes of requests already issued, in order: a value, or the exception the request failed with.

        ZooKeeperTimeout if any is still unanswered at the one shared deadline.
        """
        pending = list(results)
        deadline = self._deadline(timeout_s)
        end = time.monotonic() + deadline
        for result in pending:
            if not result.wait(max(0.0, end - time.monotonic())):
                raise ZooKeeperTimeout(f"ZooKeeper did not answer {len(pending)} request(s) within {deadline:.1f}s")
        return [result.value if result.successful() else result.exception for result in pending]

    # -- the event loop ---------------------------------------------------------------------------

    async def wait_async(self, result: IAsyncResult, timeout_s: float | None = None) -> Any:
        """``wait`` for coroutines: the loop is never blocked and no thread waits."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def settle(done: IAsyncResult) -> None:
            if future.done():
                return
            if done.successful():
                future.set_result(done.value)
            else:
                future.set_exception(done.exception)

        def on_done(done: IAsyncResult) -> None:
            try:
                loop.call_soon_threadsafe(settle, done)
            except RuntimeError:
                pass  # the loop closed while ZooKeeper was answering: nobody is waiting any more
        result.rawlink(on_done)
        deadline = self._deadline(timeout_s)
        try:
            return await asyncio.wait_for(future, deadline)
        except asyncio.TimeoutError:
            raise ZooKeeperTimeout(f"ZooKeeper did not answer within {deadline:.1f}s") from None

    async def call(self, operation: str, *args: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """``sync`` for coroutines."""
        return await self.wait_async(self._request(operation, args, kwargs), timeout_s)


class BoundedZooKeeper(BoundedZk):
    """The requests a client makes, by name, each bounded; one made while the client is not connected
    (SUSPENDED, reconnecting) fails at once with ConnectionLoss instead of waiting out its bound."""

    def _request(self, operation: str, args: tuple, kwargs: dict) -> IAsyncResult:
        if not self.client.connected:
            raise ConnectionLoss(f"ZooKeeper {operation} {args[0] if args else ''}: not connected")
        return super()._request(operation, args, kwargs)

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat]:
        return self.sync("get", path, watch=watch)

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        return self.sync("get_children", path, watch=watch)

    def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        return self.sync("exists", path, watch=watch)

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, makepath: bool = False) -> str:
        return self.sync("create", path, value, ephemeral=ephemeral, makepath=makepath)

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return self.sync("set", path, value, version=version)

    def delete(self, path: str, version: int = -1) -> None:
        self.sync("delete", path, version=version)

    def ensure_path(self, path: str) -> None:
        self.sync("ensure_path", path)
