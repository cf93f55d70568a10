"""Waiting with deadlines instead of sleeping: poll a condition until it holds or time runs out."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A polled condition did not hold before its deadline."""


def wait_until(
    condition: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Call ``condition`` until it returns something truthy and return that; raise WaitTimeout at the deadline.

    ``message`` (or a callable producing it, evaluated only on failure) describes what was awaited.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {text}")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


async def wait_until_async(
    condition: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str | Callable[[], str] = "condition",
) -> T:
    """:func:`wait_until` for a test running on an event loop: polls with asyncio.sleep, so the loop's other
    tasks (the server under test) run meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {text}")
        await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))
