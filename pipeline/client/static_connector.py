"""StaticConsumerConnector: every partition of the topics a filter allows, from a broker list, without a group.

For consumers that reach a cluster by its brokers only (no ZooKeeper, and no broker-side groups yet): the
connector owns all partitions of the allowed topics, resumes each from an offsets file
(:class:`~pipeline.client.offset_store.FileOffsetStore`, locked to one process) or per auto.offset.reset,
and hands their records out through the same :class:`KafkaStream` and fetcher as the ConsumerConnector.
Topics and partitions that appear later are found by a metadata refresh every
topic.metadata.refresh.interval.ms and start fetching without a restart. Offsets are those the
application says it is done with: ``commit_offsets(offsets)`` (records are never marked consumed by merely
being handed out, as with the ConsumerConnector's ``acknowledge_on_next=False``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping, Protocol

from pipeline.client.cluster import BrokerDiscovery, Cluster, StaticBrokerList
from pipeline.client.consumer_config import StaticConnectorConfig
from pipeline.client.consumer_connector import ConsumerRebalanceListener, start_offsets
from pipeline.client.consumer_fetcher import ConsumerFetcher
from pipeline.client.consumer_stream import KafkaStream, PartitionTopicInfo
from pipeline.client.errors import KafkaClientError
from pipeline.client.topic_filter import TopicFilter
from pipeline.protocol.errors import KafkaProtocolError

__all__ = ["OffsetStore", "StaticConsumerConnector"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class OffsetStore(Protocol):
    """Where a StaticConsumerConnector keeps its offsets (FileOffsetStore, or a store that saves more with them)."""

    def load(self) -> dict[TopicPartition, int]:
        ...

    def save(self, offsets: dict[TopicPartition, int]) -> None:
        ...

    def close(self) -> None:
        ...


class StaticConsumerConnector:
    """All partitions of the filtered topics of one cluster, offsets in ``offset_store``; the cluster is found
    through its broker list (metadata.broker.list), or through ``discovery`` when given (e.g. its ZooKeeper).

    ``rebalance_listener`` hears of the partitions as they are found (``before_starting_fetchers``, with
    their stored offsets) and of all of them at shutdown (``before_releasing_partitions``).
    """

    def __init__(self, config: Mapping[str, Any] | StaticConnectorConfig, offset_store: OffsetStore, *,
                 rebalance_listener: ConsumerRebalanceListener | None = None,
                 discovery: BrokerDiscovery | None = None) -> None:
        self.config = config if isinstance(config, StaticConnectorConfig) else StaticConnectorConfig(config)
        cfg = self.config
        self._store = offset_store
        self._stored = offset_store.load()
        self._where = cfg["metadata.broker.list"] if discovery is None else repr(discovery)
        self._cluster = Cluster(discovery or StaticBrokerList(cfg["metadata.broker.list"]), client_id=cfg["client.id"],
                                timeout_s=cfg["socket.timeout.ms"] / 1000,
                                metadata_max_age_s=cfg["topic.metadata.refresh.interval.ms"] / 1000,
                                security=cfg.security)
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._fetcher = ConsumerFetcher(self._cluster, cfg, self._lock, name="static-connector-fetcher")
        self._infos: dict[TopicPartition, PartitionTopicInfo] = {}
        self._streams: list[KafkaStream] = []
        self._filter: TopicFilter | None = None
        self._listener = rebalance_listener
        self._closing = threading.Event()
        self._refresher: threading.Thread | None = None
        self.closed = False

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1) -> list[KafkaStream]:
        """``num_streams`` streams over every partition of the topics ``topic_filter`` allows, now and later."""
        if num_streams < 1:
            raise ValueError(f"num_streams must be positive, got {num_streams}")
        if self.closed or self._filter is not None:
            raise KafkaClientError("streams were already created, or the connector is shut down")
        self._filter = topic_filter
        self._streams = [KafkaStream(f"static-{i}", self._lock, self.config["queued.max.message.chunks"],
                                     self.config["consumer.timeout.ms"], acknowledge_on_next=False)
                         for i in range(num_streams)]
        self._fetcher.start()
        self._refresher = threading.Thread(target=self._run_refresher, name="static-connector-refresh", daemon=True)
        self._refresher.start()
        return list(self._streams)

    def owned_partitions(self) -> list[TopicPartition]:
        """The partitions read now (every one found so far)."""
        with self._lock:
            return sorted(self._infos)

    def commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Set the consumed offsets of these partitions and store every partition's; return those changed."""
        with self._commit_lock:
            with self._lock:
                changed = {}
                for tp, offset in offsets.items():
                    info = self._infos.get(tp)
                    if info is not None and offset != info.committed_offset:
                        info.consumed_offset = offset
                        changed[tp] = offset
                if not changed:
                    return {}
                stored = dict(self._stored)
                stored.update(changed)
            self._store.save(stored)
            with self._lock:
                self._stored = stored
                for tp, offset in changed.items():
                    info = self._infos.get(tp)
                    if info is not None:
                        info.committed_offset = offset
            return changed

    def shutdown(self) -> None:
        """Stop fetching, let the listener finish and commit, end the streams, release the offsets file."""
        if self.closed:
            return
        self.closed = True
        self._closing.set()
        if self._refresher is not None and self._refresher is not threading.current_thread():
            self._refresher.join(30)
        self._fetcher.stop()
        with self._lock:
            infos = list(self._infos.values())
            for info in infos:
                info.active = False
        if self._listener is not None and infos:
            self._listener.before_releasing_partitions([(i.topic, i.partition) for i in infos])
        for stream in self._streams:
            stream.shutdown()
        self._store.close()

    # -- finding partitions ---------------------------------------------------------------------------

    def _run_refresher(self) -> None:
        interval_s = self.config["topic.metadata.refresh.interval.ms"] / 1000
        while not self._closing.is_set():
            try:
                self._find_partitions()
            except (KafkaClientError, KafkaProtocolError, OSError) as exc:
                log.warning("cannot list the topics of %s now (retried in %.0f s): %s", self._where, interval_s, exc)
            self._closing.wait(interval_s)

    def _find_partitions(self) -> None:
        assert self._filter is not None
        topics = self._cluster.topics()
        found = sorted((name, p) for name in self._filter.select(list(topics))
                       for p in topics[name].partitions if (name, p) not in self._infos)
        if not found or self._closing.is_set():
            return
        with self._lock:
            start = len(self._infos)
        infos = {}
        for index, (topic, partition) in enumerate(found, start=start):
            stream = self._streams[index % len(self._streams)]
            infos[(topic, partition)] = PartitionTopicInfo(topic, partition, stream.queue,
                                                           self._stored.get((topic, partition)),
                                                           self._fetcher.fetch_size)
        infos = start_offsets(self._listener, infos)
        with self._lock:
            self._infos.update(infos)
            self._fetcher.assign(self._infos.values())
        log.info("reading %s from %s", ", ".join(f"{t}-{p}" for t, p in found), self._where)

    def __repr__(self) -> str:
        return f"StaticConsumerConnector({self._where!r})"
