"""The RecordBatch v2 record format in one place (Kafka's org.apache.kafka.common.record): the
format of the records field on the wire and of every log segment on disk.

One job per module: ``varint`` (zigzag varints), ``batch`` (the 61-byte header, CRC, patching),
``record`` (the Record type), ``encode`` (records -> bytes), ``decode`` (bytes -> records),
``validate`` (the broker's check of produced records) and ``builder`` (BatchBuilder). This module
names the API the clients, services and broker use; the header constants are in ``batch``.
"""

from pipeline.records.batch import BatchHeader, CorruptBatchError, iter_batches, parse_header
from pipeline.records.builder import BatchBuilder
from pipeline.records.decode import decode_batch, decode_records
from pipeline.records.encode import encode_batch, now_ms, record_size
from pipeline.records.record import Header, Record
from pipeline.records.validate import InvalidRecordsError, validate_records

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
