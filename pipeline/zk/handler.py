"""kazoo's threading handler with a cheaper wait: its connection loop waits on its socket and wake-up pipe before
every request, response and ping, and kazoo's ``selector_select`` creates, registers and closes an epoll selector
for each of those waits. ``PollingHandler`` keeps one ``select.poll`` per thread for the file descriptors it last
waited on (poll keeps no kernel state, so a descriptor number reused by a new socket is simply polled again)."""

from __future__ import annotations

import select
import threading
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["PollingHandler"]


class PollingHandler(SequentialThreadingHandler):
    """A SequentialThreadingHandler whose ``select`` of readable descriptors reuses a poll object."""

    def __init__(self) -> None:
        super().__init__()
        self._pollers = threading.local()

    def select(self, rlist: list[Any], wlist: list[Any], xlist: list[Any],
               timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
        if wlist or xlist:
            return super().select(rlist, wlist, xlist, timeout)
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be non-negative")
        fds = tuple(fileobj_to_fd(f) for f in rlist)  # a closed one refused as kazoo refuses it
        cached = getattr(self._pollers, "last", None)
        if cached is None or cached[0] != fds:
            poller = select.poll()
            for fd in set(fds):
                poller.register(fd, select.POLLIN)
            cached = self._pollers.last = (fds, poller)
        # Error and hang-up count as readable, as they do for selectors (the reader then meets them).
        ready = {fd for fd, _ in cached[1].poll(None if timeout is None else timeout * 1000)}
        return [f for f, fd in zip(rlist, fds) if fd in ready], [], []
