"""Our Kafka clients, in the paper's API: Producer, SimpleConsumer, Consumer, and what they share."""

from pipeline.client.cluster import BrokerDiscovery, Cluster, StaticBrokerList
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import (
    KafkaClientError,
    KafkaConnectionError,
    KafkaProtocolError,
    NoBrokersAvailable,
    OffsetOutOfRange,
    UnknownTopicError,
)

__all__ = [
    "BrokerConnection", "BrokerDiscovery", "Cluster", "KafkaClientError", "KafkaConnectionError",
    "KafkaProtocolError", "NoBrokersAvailable", "OffsetOutOfRange", "StaticBrokerList", "UnknownTopicError",
]
