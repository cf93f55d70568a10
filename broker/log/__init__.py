"""Storage: one partition's log of segment files with sparse offset and time indexes."""

from broker.log.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    TransactionCoordinatorFencedError,
    UnexpectedAppendOffsetError,
)
from broker.log.fetch_slice import FetchSlice
from broker.log.leader_epoch_cache import EpochEntry, LeaderEpochFileCache
from broker.log.log import AppendInfo, Log
from broker.log.log_config import LogConfig
from broker.log.log_manager import LogManager
from broker.log.log_segment import LogSegment
from broker.log.offset_index import OffsetIndex
from broker.log.producer_state import ProducerStateManager
from broker.log.time_index import TimeIndex
from broker.log.transaction_index import AbortedTxn, TransactionIndex

__all__ = [
    "AbortedTxn",
    "AppendInfo",
    "CorruptRecordError",
    "EpochEntry",
    "FetchSlice",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LeaderEpochFileCache",
    "Log",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogSegment",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerStateManager",
    "RecordTooLargeError",
    "TimeIndex",
    "TransactionCoordinatorFencedError",
    "TransactionIndex",
    "UnexpectedAppendOffsetError",
]
