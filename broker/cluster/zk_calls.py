"""BoundedZk: every ZooKeeper call a broker makes, with a deadline.

kazoo's synchronous calls wait as long as ZooKeeper takes, and kazoo queues requests while it
reconnects, so a stopped or unreachable server would hold the caller forever. Here every call is a
kazoo async request waited on for at most a deadline (``zookeeper.session.timeout.ms`` unless the caller
has less time left); past it the caller gets ZooKeeperTimeout and the request is abandoned, not retried.
On the event loop the wait is a future completed from kazoo's thread, so no executor thread is held;
controller and registry threads wait on the kazoo result itself. Many requests are issued together
and waited on with one deadline (``all``), so a batch costs one round trip, not one per znode.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterable

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult


class ZooKeeperTimeout(TimeoutError):
    """ZooKeeper did not answer within the deadline (it is slow, stopped or unreachable)."""


class BoundedZk:
    """A kazoo client whose calls all end within a deadline."""

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
