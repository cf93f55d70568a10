"""The RecordBatch v2 record format (Kafka's org.apache.kafka.common.record): the format of the
records field on the wire and of every log segment on disk. This module names the public API."""

from pipeline.records.batch import BatchHeader, CorruptBatchError, iter_batches, parse_header
from pipeline.records.decode import (
    BatchBuilder,
    Header,
    InvalidRecordsError,
    Record,
    decode_batch,
    decode_records,
    encode_batch,
    now_ms,
    record_size,
    validate_records,
)

__all__ = [
    "BatchBuilder",
    "BatchHeader",
    "CorruptBatchError",
    "Header",
    "InvalidRecordsError",
    "Record",
    "decode_batch",
    "decode_records",
    "encode_batch",
    "iter_batches",
    "now_ms",
    "parse_header",
    "record_size",
    "validate_records",
]
