"""Storage-layer errors, each carrying the Kafka error code the request handlers send back."""

from __future__ import annotations


class LogError(Exception):
    """Base class of the errors the log raises towards the request layer."""

    error_code: int = -1


class OffsetOutOfRangeError(LogError):
    """A fetch asked for an offset below the log start offset or above the log end offset."""

    error_code = 1


class CorruptRecordError(LogError):
    """A batch with bad framing, a magic other than 2, or a CRC-32C mismatch (CORRUPT_MESSAGE)."""

    error_code = 2


class RecordTooLargeError(LogError):
    """A batch larger than max_message_bytes (MESSAGE_TOO_LARGE)."""

    error_code = 10


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's batch whose sequence does not follow the last one appended."""

    error_code = 45


class InvalidProducerEpochError(LogError):
    """An idempotent producer's batch carrying an epoch older than the one the log knows."""

    error_code = 47


class InvalidRecordError(LogError):
    """A request that is not one whole, self-consistent batch, or a batch Kafka refuses from clients
    (INVALID_RECORD). ``record_errors`` lists (index in the batch, message) of the bad records."""

    error_code = 87

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = record_errors or []


class UnsupportedCompressionTypeError(LogError):
    """A batch whose compression bits name no codec Kafka defines (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = 76


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose first batch does not start at the log end offset (Kafka's
    UnexpectedAppendOffsetException; the replica fetcher truncates or refetches)."""


class KafkaStorageError(LogError):
    """The log is closed or its directory unusable (KAFKA_STORAGE_ERROR)."""

    error_code = 56


class InvalidTxnStateError(LogError):
    """A producer's batch that does not fit its transaction's state, e.g. a non-transactional batch
    inside its open transaction (INVALID_TXN_STATE)."""

    error_code = 48


class TransactionCoordinatorFencedError(LogError):
    """A transaction marker from a coordinator epoch older than the last one the partition saw for that
    producer (TRANSACTION_COORDINATOR_FENCED)."""

    error_code = 52
