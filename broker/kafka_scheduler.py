"""KafkaScheduler: a few named background threads for the broker's disk work (Kafka's KafkaScheduler).

fsyncs, segment and directory deletions, retention and checkpoint writes run here instead of on the
event loop, so a slow disk never stalls the connections. The pool is sized by Kafka's
``background.threads``; one dispatcher thread starts periodic tasks on time. It is a
``concurrent.futures.Executor``, so the log layer only sees the standard interface.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

log = logging.getLogger(__name__)


class KafkaScheduler(ThreadPoolExecutor):
    """A thread pool running one-off tasks (``submit``) and periodic ones (``schedule``)."""

    def __init__(self, threads: int, thread_name_prefix: str = "kafka-scheduler") -> None:
        super().__init__(max_workers=threads, thread_name_prefix=thread_name_prefix)
        self._timers: list[tuple[float, int, str, Callable[[], object], float]] = []
        self._sequence = itertools.count()
        self._wakeup = threading.Condition()
        self._stopping = False
        self._running: dict[str, Future] = {}
        self._dispatcher = threading.Thread(target=self._dispatch, name=f"{thread_name_prefix}-timer", daemon=True)
        self._dispatcher.start()

    def schedule(self, name: str, action: Callable[[], object], period_ms: int, delay_ms: int | None = None) -> None:
        """Run ``action`` every ``period_ms`` (first after ``delay_ms``, default one period) on the pool.

        A run that is still going when the next is due is not started twice; a failing run is
        logged and the task keeps its schedule.
        """
        first = time.monotonic() + (period_ms if delay_ms is None else delay_ms) / 1000
        with self._wakeup:
            heapq.heappush(self._timers, (first, next(self._sequence), name, action, period_ms / 1000))
            self._wakeup.notify()

    def _dispatch(self) -> None:
        with self._wakeup:
            while not self._stopping:
                if not self._timers:
                    self._wakeup.wait()
                    continue
                due, _, name, action, period = self._timers[0]
                now = time.monotonic()
                if due > now:
                    self._wakeup.wait(due - now)
                    continue
                heapq.heapreplace(self._timers, (max(due + period, now), next(self._sequence), name, action, period))
                running = self._running.get(name)
                if running is None or running.done():
                    self._running[name] = self.submit(self._run_periodic, name, action)

    @staticmethod
    def _run_periodic(name: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception:
            log.exception("periodic task %s failed; it will run again", name)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the periodic tasks, then let the pool finish what it runs (and, unless cancelled, what it queued)."""
        with self._wakeup:
            self._stopping = True
            self._timers.clear()
            self._wakeup.notify()
        if threading.current_thread() is not self._dispatcher:
            self._dispatcher.join()
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
