"""One Jepsen-style run: a writer (acks=all, idempotent) and a reader work on a topic while the nemesis
bounces partition leaders; then every partition is read from its start and the history is checked.

``run`` needs a started BrokerCluster and an existing topic; it returns the history, the checker's result
and every bounce with its failover time.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable

from tests.support.cluster import BrokerCluster
from tests.support.polling import wait_until

from .checker import CheckResult, check
from .clients import WRITERS, ConfluentWriter, Reader, Writer, read_final
from .history import History
from .nemesis import Bounce, Nemesis


@dataclass
class RunResult:
    """What a run produced: its history, the checker's verdict, the bounces and the reader's errors."""

    history: History
    result: CheckResult
    bounces: list[Bounce]
    elapsed_s: float
    reader_errors: list[str]

    def failover_summary(self) -> str:
        """Median and largest failover time, clean and hard bounces apart."""
        parts = []
        for kind, hard in (("clean", False), ("hard", True)):
            times = [b.failover_s for b in self.bounces if b.hard == hard]
            if times:
                parts.append(f"{kind} {len(times)}: median {statistics.median(times) * 1000:.0f} ms, "
                             f"max {max(times) * 1000:.0f} ms")
        return "; ".join(parts) or "no bounces"


def is_hard(number: int, hard_ratio: float) -> bool:
    """Spread hard bounces evenly: bounce ``number`` is hard when it makes the share reach ``hard_ratio``."""
    return int((number + 1) * hard_ratio) > int(number * hard_ratio)


class _Load:
    """A thread sending ``writer``'s numbered values round-robin over the partitions at ``rate`` per second."""

    def __init__(self, writer: Writer, partitions: int, rate: float) -> None:
        self.writer = writer
        self.partitions = partitions
        self.interval = 1.0 / rate
        self.sent = 0
        self.error: BaseException | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jepsen-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        try:
            while not self._stopped.is_set():
                self.writer.send(self.sent % self.partitions, f"{self.writer.name}-{self.sent}")
                self.sent += 1
                pause = started + self.sent * self.interval - time.monotonic()
                if pause > 0:
                    self._stopped.wait(pause)
        except BaseException as error:
            self.error = error
            raise

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(30)


def run(cluster: BrokerCluster, topic: str, partitions: int, bounces: int, *, hard_ratio: float = 0.5,
        writer: str = "confluent", rate: float = 300.0, flush_timeout_s: float = 120.0,
        on_bounce: Callable[[int, Bounce], None] | None = None) -> RunResult:
    """Load ``topic`` while bouncing the leader of partition i % partitions for i in range(bounces)."""
    started = time.monotonic()
    history = History()
    bootstrap = cluster.bootstrap
    load_writer = WRITERS[writer](history, bootstrap, topic, "writer")
    probe = ConfluentWriter(history, bootstrap, topic, "probe")
    reader = Reader(history, bootstrap, topic, partitions).start()
    load = _Load(load_writer, partitions, rate)
    nemesis = Nemesis(cluster, topic, probe)
    done: list[Bounce] = []
    finished = False
    try:
        wait_until(lambda: len(history.acks) >= partitions, 60, interval=0.05,
                   message="the writer's first acknowledgements")
        for number in range(bounces):
            bounce = nemesis.bounce(number % partitions, is_hard(number, hard_ratio))
            done.append(bounce)
            if on_bounce is not None:
                on_bounce(number, bounce)
        finished = True
    finally:
        load.stop()
        # After a failure nothing waits for answers that may never come.
        wait_s = flush_timeout_s if finished else 0.0
        unanswered = load_writer.flush(wait_s)
        probe.flush(wait_s)
        load_writer.close()
        probe.close()
        reader.stop()
    if load.error is not None:
        raise RuntimeError(f"the writer failed: {load.error!r}") from load.error
    if unanswered:
        raise RuntimeError(f"{unanswered} messages still unanswered {flush_timeout_s:.0f}s after the load stopped")
    for partition in range(partitions):
        nemesis.leader(partition)
    for partition, log in read_final(bootstrap, topic, partitions).items():
        history.set_final(partition, log)
    return RunResult(history, check(history), done, time.monotonic() - started, reader.errors)
