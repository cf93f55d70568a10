"""Our Kafka clients, in the paper's API: Producer, SimpleConsumer, Consumer, ConsumerConnector, AdminClient.

    from pipeline.client import Producer, ProducerData, SimpleConsumer, FetchRequest, Consumer
    from pipeline.client import ConsumerConnector, Whitelist, Blacklist

The Producer writes in transactions with a ``transactional.id`` (init_transactions, begin_transaction,
send_offsets_to_transaction, commit_transaction, abort_transaction); consumers read only committed transactions
with ``isolation.level=read_committed``.

Configuration uses the property names of Kafka's clients of the paper's era (metadata.broker.list,
producer.type, batch.size, queue.time, request.required.acks, compression.codec, ...), with today's
names accepted as aliases.
"""

# Each name is imported from its module on first use: a process that needs one client (a broker needs only
# BrokerConnection) does not pay for importing them all.
import importlib
from typing import Any

_EXPORTS = {
    "accumulator": "QueueFullError",
    "admin": "AdminClient EARLIEST_TIMESTAMP LATEST_TIMESTAMP TopicDescription",
    "cluster": "BrokerDiscovery Cluster StaticBrokerList",
    "connection": "BrokerConnection",
    "consumer": "Consumer ConsumerRecord",
    "consumer_connector": "ConsumerConnector ConsumerTimeout KafkaStream",
    "encoder": "DefaultEncoder Encoder StringEncoder",
    "errors": "KafkaClientError KafkaConnectionError KafkaProtocolError NoBrokersAvailable OffsetOutOfRange "
              "ProducerFencedError TransactionAbortableError TransactionFatalError TransactionStateError "
              "UnknownTopicError",
    "isolation": "READ_COMMITTED READ_UNCOMMITTED",
    "partitioner": "DefaultPartitioner Partitioner RoundRobinPartitioner",
    "producer": "CallbackHandler MessageSizeTooLargeError ProduceError ProduceResult Producer ProducerData",
    "producer_config": "ProducerConfig",
    "simple_consumer": "FetchRequest MessageSet MessageSizeTooLarge SimpleConsumer",
    "transaction_admin": "TransactionDescription TransactionListing",
    "topic_filter": "Blacklist TopicFilter Whitelist",
    "zk_discovery": "ZooKeeperBrokerDiscovery",
}
_MODULES = {name: module for module, names in _EXPORTS.items() for name in names.split()}

__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})
