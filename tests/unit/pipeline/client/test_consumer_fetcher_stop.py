"""ConsumerFetcher.stop while a fetch is in flight: the connections are closed by whoever holds them last.

A broker that does not answer holds a fetch up to socket.timeout.ms (30 s), longer than stop() waits (10 s);
closing the connections from the stopping thread then would pull them from under the fetch. The fetch round
here is a stand-in that blocks until released (the Cluster too: only its close() is observed).
"""

from __future__ import annotations

import queue
import threading

from pipeline.client.consumer_config import ConsumerConnectorConfig
from pipeline.client.consumer_fetcher import ConsumerFetcher
from pipeline.client.consumer_stream import PartitionTopicInfo
from tests.support import wait_until


class Connections:
    """The Cluster's part in this: close() and who called it while a fetch was running."""

    def __init__(self) -> None:
        self.closed_by: list[str] = []
        self.fetching = threading.Event()
        self.release = threading.Event()

    def close(self) -> None:
        self.closed_by.append(threading.current_thread().name)

    def fetch_round(self, ready: list, max_wait_ms: int) -> None:
        assert not self.closed_by, "connections closed while a fetch used them"
        self.fetching.set()
        self.release.wait(10)


def fetcher_in_a_fetch(connections: Connections) -> ConsumerFetcher:
    config = ConsumerConnectorConfig({"zookeeper.connect": "127.0.0.1:1/x", "group.id": "g"})
    fetcher = ConsumerFetcher(connections, config, threading.Lock(), name="fetcher")  # type: ignore[arg-type]
    fetcher._fetcher.fetch_round = connections.fetch_round  # type: ignore[method-assign]
    fetcher.assign([PartitionTopicInfo("t", 0, queue.Queue(), 0, 1024)])
    fetcher.start()
    assert connections.fetching.wait(5)
    return fetcher


def test_a_fetch_outlasting_stop_closes_its_connections_itself_when_it_ends():
    connections = Connections()
    fetcher = fetcher_in_a_fetch(connections)
    fetcher.stop(timeout=0.05)
    assert connections.closed_by == []  # the fetch still holds them
    connections.release.set()
    wait_until(lambda: connections.closed_by == ["fetcher"], 5, message=lambda: f"closed by {connections.closed_by}")


def test_a_stop_after_the_fetch_ended_has_the_connections_closed():
    connections = Connections()
    fetcher = fetcher_in_a_fetch(connections)
    connections.release.set()
    fetcher.stop(timeout=5)
    assert connections.closed_by and not fetcher._thread.is_alive()
