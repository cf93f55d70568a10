"""The high-level consumer's fetcher: one thread that keeps the owned partitions flowing into the streams.

Each round fetches every owned partition that is not paused through a
:class:`~pipeline.client.partition_fetcher.PartitionFetcher` (one long-poll Fetch per leader broker, the
same machinery as the plain Consumer) and puts each partition's result, a chunk, on the queue of the
stream that reads it; a full queue holds the fetcher back (queued.max.message.chunks). A partition
without a reachable leader (its broker is down) pauses alone and is retried after
refresh.leader.backoff.ms; the others go on. Positions start from the committed offset or, without one,
from auto.offset.reset (smallest/largest, looked up with ListOffsets), and an out-of-range offset is
reset the same way. An error the reader must see stops that partition and is raised by its stream.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Iterable

from pipeline.client.cluster import Cluster
from pipeline.client.consumer_stream import Chunk, PartitionTopicInfo
from pipeline.client.fetch_state import FetchStateMachine, reset_time
from pipeline.client.partition_fetcher import PartitionFetcher
from pipeline.client.simple_consumer import MessageSet
from pipeline.config import Config

__all__ = ["ConsumerFetcher"]

log = logging.getLogger(__name__)

# Longest sleep with nothing to fetch; assign() and stop() wake the thread earlier.
_IDLE_WAIT_S = 1.0


class ConsumerFetcher:
    """Fetches the partitions given to ``assign`` from their leaders into their streams' queues."""

    def __init__(self, cluster: Cluster, config: Config, lock: threading.Lock, name: str = "consumer-fetcher") -> None:
        self._cluster = cluster
        self._lock = lock
        self._max_wait_ms = config["fetch.wait.max.ms"]
        self._start_time = reset_time(config["auto.offset.reset"])
        self._machine = FetchStateMachine.from_config(config)
        self._fetcher: PartitionFetcher[PartitionTopicInfo] = PartitionFetcher(
            cluster, self._machine, min_bytes=config["fetch.min.bytes"], max_bytes=config["fetch.max.bytes"],
            deliver=self._deliver, fail=self._fail, started=self._started,
            isolation_level=config["isolation.level"])
        self._infos: list[PartitionTopicInfo] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def fetch_size(self) -> int:
        return self._machine.fetch_size

    def start(self) -> None:
        self._thread.start()

    def assign(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Fetch these partitions from now on (the previous ones were deactivated by the caller)."""
        infos = list(infos)
        for info in infos:
            if info.fetch_offset is None:
                info.start_time = self._start_time
        self._infos = infos
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop fetching and close the connections. A fetch still in flight after ``timeout`` (a broker that
        does not answer holds it up to socket.timeout.ms) keeps its connections: the fetcher thread closes them
        when that fetch ends, instead of having them closed under it."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._cluster.close()

    # -- the loop ------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._fetch_until_stopped()
        finally:
            self._cluster.close()

    def _fetch_until_stopped(self) -> None:
        clock = self._machine.clock
        while not self._stop.is_set():
            ready, wake = self._machine.ready([i for i in self._infos if i.active])
            if not ready:
                wait = _IDLE_WAIT_S if wake is None else min(max(wake - clock(), 0.0), _IDLE_WAIT_S)
                self._wake.wait(wait)
                self._wake.clear()
                continue
            try:
                self._fetcher.fetch_round(ready, self._max_wait_ms)
            except Exception as exc:
                # Not a broker or connection problem: tell the readers instead of dying silently.
                log.exception("consumer fetcher failed")
                for info in ready:
                    self._fail(info, exc)

    def _started(self, info: PartitionTopicInfo) -> None:
        with self._lock:
            if info.consumed_offset is None:
                info.consumed_offset = info.fetch_offset

    def _deliver(self, info: PartitionTopicInfo, result: MessageSet) -> None:
        if info.active:
            self._put(info, Chunk(info, result.record_batches(), result.next_offset))

    def _fail(self, info: PartitionTopicInfo, error: BaseException) -> None:
        """Stop fetching the partition and hand the error to its reader."""
        log.error("%s-%d: fetching stopped: %s", info.topic, info.partition, error)
        self._machine.fail(info)
        self._put(info, error)

    def _put(self, info: PartitionTopicInfo, item: object) -> None:
        while info.active and not self._stop.is_set():
            try:
                info.queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
