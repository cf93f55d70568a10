"""Our Kafka clients, in the paper's API: Producer, SimpleConsumer, Consumer, ConsumerConnector, AdminClient.

    from pipeline.client import Producer, ProducerData, SimpleConsumer, FetchRequest, Consumer
    from pipeline.client import ConsumerConnector, Whitelist, Blacklist

Configuration uses the property names of Kafka's clients of the paper's era (metadata.broker.list,
producer.type, batch.size, queue.time, request.required.acks, compression.codec, ...), with today's
names accepted as aliases.
"""

from pipeline.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AdminClient, TopicDescription
from pipeline.client.cluster import BrokerDiscovery, Cluster, StaticBrokerList
from pipeline.client.connection import BrokerConnection
from pipeline.client.consumer import Consumer, ConsumerRecord
from pipeline.client.consumer_connector import ConsumerConnector, ConsumerTimeout, KafkaStream
from pipeline.client.encoder import DefaultEncoder, Encoder, StringEncoder
from pipeline.client.errors import (
    KafkaClientError,
    KafkaConnectionError,
    KafkaProtocolError,
    NoBrokersAvailable,
    OffsetOutOfRange,
    UnknownTopicError,
)
from pipeline.client.partitioner import DefaultPartitioner, Partitioner, RoundRobinPartitioner
from pipeline.client.producer import (
    CallbackHandler,
    MessageSizeTooLargeError,
    ProduceError,
    ProduceResult,
    Producer,
    ProducerData,
)
from pipeline.client.accumulator import QueueFullError
from pipeline.client.producer_config import ProducerConfig
from pipeline.client.simple_consumer import FetchRequest, MessageSet, MessageSizeTooLarge, SimpleConsumer
from pipeline.client.topic_filter import Blacklist, TopicFilter, Whitelist
from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery

__all__ = [
    "AdminClient", "Blacklist", "BrokerConnection", "BrokerDiscovery", "CallbackHandler", "Cluster", "Consumer",
    "ConsumerConnector", "ConsumerRecord", "ConsumerTimeout", "KafkaStream", "TopicFilter", "Whitelist",
    "ZooKeeperBrokerDiscovery",
    "DefaultEncoder", "DefaultPartitioner", "EARLIEST_TIMESTAMP", "Encoder", "FetchRequest", "KafkaClientError",
    "KafkaConnectionError", "KafkaProtocolError", "LATEST_TIMESTAMP", "MessageSet", "MessageSizeTooLarge",
    "MessageSizeTooLargeError", "NoBrokersAvailable", "OffsetOutOfRange", "Partitioner", "ProduceError",
    "ProduceResult", "Producer", "ProducerConfig", "ProducerData", "QueueFullError", "RoundRobinPartitioner",
    "SimpleConsumer", "StaticBrokerList", "StringEncoder", "TopicDescription", "UnknownTopicError",
]
