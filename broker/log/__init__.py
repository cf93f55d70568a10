"""Storage: one partition's log of segment files with sparse offset and time indexes."""

from broker.log.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
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

__all__ = [
    "AppendInfo",
    "CorruptRecordError",
    "EpochEntry",
    "FetchSlice",
    "InvalidProducerEpochError",
    "InvalidRecordError",
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
    "UnexpectedAppendOffsetError",
]
