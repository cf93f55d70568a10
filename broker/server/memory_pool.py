"""RequestMemoryPool: the cap on request bytes held across all connections (Kafka's ``queued.max.request.bytes``).

The pool allocates nothing: connections charge it for the bytes they have actually read and release
those bytes once the request they belong to is answered. A connection asks :meth:`readable` how much it
may read; at zero it stops reading its socket (TCP then holds the client back) and waits in
:meth:`wait` until bytes are released.

One connection at a time, in the middle of a request, may read past the cap (the overflow holder):
without it, two connections each holding part of a large request could fill the pool and wait for each
other forever, and a request larger than the whole cap could never be read. The holder gives the
overflow back once it has answered a request, so memory stays within the cap plus about one request.
"""

from __future__ import annotations

import asyncio

UNLIMITED = 1 << 62


class RequestMemoryPool:
    """Counts request bytes read but not yet answered, against a capacity (None: no cap)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.used = 0
        self._overflow_holder: object | None = None
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        """Readers waiting for bytes to be released."""
        return sum(not waiter.done() for waiter in self._waiters)

    def readable(self, holder: object, partial: bool) -> int:
        """How many bytes ``holder`` may read now; 0 means wait for :meth:`wait`.

        ``partial``: the holder has read part of a request. Only such a holder may take the overflow; one
        between requests would keep it while waiting for its client.
        """
        if self.capacity is None:
            return UNLIMITED
        room = self.capacity - self.used
        if room > 0:
            return room
        if self._overflow_holder is None and partial:
            self._overflow_holder = holder
        return UNLIMITED if self._overflow_holder is holder else 0

    def charge(self, size: int) -> None:
        """Count ``size`` bytes just read."""
        self.used += size

    def release(self, size: int, holder: object) -> None:
        """Give back ``size`` bytes of an answered (or dropped) request of ``holder`` and wake waiting readers."""
        self.used -= size
        if self._overflow_holder is holder:
            self._overflow_holder = None
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def wait(self) -> None:
        """Wait until some bytes are released (then ask :meth:`readable` again)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter
