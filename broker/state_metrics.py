"""BrokerStateCollector: the broker's state as Prometheus gauges, computed when scraped (no per-append cost).

Kafka's ReplicaManager LeaderCount, PartitionCount, UnderReplicatedPartitions and UnderMinIsrPartitionCount,
the ReplicaFetcherManager's MaxLag, KafkaController ActiveControllerCount and
OfflinePartitionsCount, the Log gauges of every partition log (Size, LogStartOffset, LogEndOffset,
NumLogSegments) and the socket server's connection-count, connection-creation-total and
connection-close-total. A scrape runs in prometheus_client's HTTP thread while the event loop creates and
deletes partitions: it reads only copies taken in one step (``list(d.values())`` and the like), and a
log deleted meanwhile is reported as it was.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.log.log_manager import LogManager
from broker.metadata import NO_LEADER, MetadataView
from broker.replica_manager import ReplicaManager

__all__ = ["BrokerStateCollector", "ConnectionCounts"]


class ConnectionCounts(Protocol):
    """What the socket server tells about its connections."""

    connection_count: int
    connections_created: int
    connections_closed: int
    client_errors: dict[str, int]


class BrokerStateCollector(Collector):
    """Gauges read from the broker's layers at scrape time (see the module docstring)."""

    def __init__(self, broker_id: int, log_manager: LogManager, replica_manager: ReplicaManager,
                 metadata: MetadataView, connections: ConnectionCounts, is_active_controller: Callable[[], bool],
                 replica_lag: Callable[[], int] = lambda: 0) -> None:
        self._broker_id = broker_id
        self._log_manager = log_manager
        self._replica_manager = replica_manager
        self._metadata = metadata
        self._connections = connections
        self._is_active_controller = is_active_controller
        self._replica_lag = replica_lag

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        yield from self._partitions()
        yield from self._logs()
        yield from self._connection_metrics()

    def _partitions(self) -> Iterator[Metric]:
        assigned = offline = 0
        metadata = self._metadata
        for topic in metadata.topic_names():
            for partition in metadata.describe_topic(topic) or ():
                if self._broker_id in partition.replicas:
                    assigned += 1
                if partition.leader == NO_LEADER:
                    offline += 1
        active = self._is_active_controller()
        led = self._replica_manager.hosted_partitions()
        yield _gauge("kafka_server_replicamanager_leader_count", "Partitions this broker leads: LeaderCount", len(led))
        yield _gauge("kafka_server_replicamanager_under_replicated_partitions",
                     "Led partitions whose ISR is smaller than their replica list: UnderReplicatedPartitions",
                     sum(1 for p in led if p.under_replicated))
        yield _gauge("kafka_server_replicamanager_under_min_isr_partition_count",
                     "Led partitions whose ISR is below min.insync.replicas: UnderMinIsrPartitionCount",
                     sum(1 for p in led if p.under_min_isr))
        yield _gauge("kafka_server_replicafetchermanager_maxlag",
                     "Largest lag of a followed partition behind its leader, in messages: ReplicaFetcherManager MaxLag",
                     self._replica_lag())
        yield _gauge("kafka_server_replicamanager_partition_count",
                     "Partitions with a replica on this broker: PartitionCount", assigned)
        yield _gauge("kafka_controller_kafkacontroller_active_controller_count",
                     "1 on the active controller, else 0: ActiveControllerCount", 1 if active else 0)
        yield _gauge("kafka_controller_kafkacontroller_offline_partitions_count",
                     "Partitions without a live leader in this broker's view of the cluster: OfflinePartitionsCount",
                     offline)

    def _logs(self) -> Iterator[Metric]:
        families = (
            GaugeMetricFamily("kafka_log_log_size_bytes", "Bytes of the partition's segment files: Log Size",
                              labels=["topic", "partition"]),
            GaugeMetricFamily("kafka_log_log_start_offset", "First offset in the partition's log: LogStartOffset",
                              labels=["topic", "partition"]),
            GaugeMetricFamily("kafka_log_log_end_offset", "Offset the next record appended gets: LogEndOffset",
                              labels=["topic", "partition"]),
            GaugeMetricFamily("kafka_log_log_num_log_segments", "Segments of the partition's log: NumLogSegments",
                              labels=["topic", "partition"]),
        )
        size, start, end, segments = families
        for (topic, index), log in sorted(self._log_manager.all_logs().items()):
            labels = [topic, str(index)]
            size.add_metric(labels, log.size_in_bytes())
            start.add_metric(labels, log.log_start_offset)
            end.add_metric(labels, log.log_end_offset)
            segments.add_metric(labels, log.segment_count)
        yield from families

    def _connection_metrics(self) -> Iterator[Metric]:
        connections = self._connections
        yield _gauge("kafka_server_socket_server_metrics_connection_count", "Open client connections: connection-count",
                     connections.connection_count)
        created = CounterMetricFamily("kafka_server_socket_server_metrics_connection_creation",
                                      "Client connections accepted: connection-creation-total")
        created.add_metric([], connections.connections_created)
        closed = CounterMetricFamily("kafka_server_socket_server_metrics_connection_close",
                                     "Client connections closed: connection-close-total")
        closed.add_metric([], connections.connections_closed)
        client_errors = CounterMetricFamily(
            "kafka_server_socket_server_metrics_client_errors",
            "Connections closed or refused, and requests refused, for what their client did, by kind "
            "(malformed_request, unsupported_version, frame_too_large, request_read_timeout, closed_mid_frame, "
            "refused_connection, invalid_topic_name, authentication_failed, ssl_handshake_timeout, ...); lines about "
            "them are logged at most once a minute per client address and kind", labels=["kind"])
        for kind, count in sorted(connections.client_errors.items()):
            client_errors.add_metric([kind], count)
        yield created
        yield closed
        yield client_errors


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
