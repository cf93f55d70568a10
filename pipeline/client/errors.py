"""Errors our clients raise: connection failures, broker error codes, offsets outside a log."""

from __future__ import annotations

from pipeline.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = ["AuthenticationError", "DeliveryTimeoutError", "KafkaClientError", "KafkaConnectionError", "KafkaProtocolError", "NoBrokersAvailable",
           "OffsetOutOfRange", "ProducerFencedError", "TransactionAbortableError", "TransactionFatalError",
           "TransactionStateError", "UnknownPartitionError", "UnknownTopicError", "UnsupportedVersionError",
           "ErrorCode"]


class KafkaClientError(Exception):
    """Base of the errors raised by our clients that are not a broker's error code."""

    retriable = False


class KafkaConnectionError(KafkaClientError):
    """A broker could not be reached, or the connection broke or timed out; retrying may succeed."""

    retriable = True


class NoBrokersAvailable(KafkaConnectionError):
    """None of the configured brokers answered."""


class DeliveryTimeoutError(KafkaClientError):
    """Messages were not stored within delivery.timeout.ms of send() taking them (Kafka's TimeoutException on
    expiry); ``last_error`` is what the last attempt met (None if they were never sent). Final, not retried."""

    def __init__(self, message: str, last_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error


class AuthenticationError(KafkaClientError):
    """The broker refused our SASL login (wrong password, unknown user, a mechanism it does not offer), or could
    not prove it knows our credential; retrying with the same settings cannot succeed (Kafka's
    SaslAuthenticationException)."""


class UnsupportedVersionError(KafkaClientError):
    """The broker does not speak any version of an API that we speak."""


class UnknownTopicError(KafkaProtocolError):
    """The topic does not exist (and was not created automatically)."""

    def __init__(self, topic: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        self.topic = topic


class UnknownPartitionError(KafkaClientError):
    """A message was sent to an explicit partition the topic does not have (after a fresh metadata lookup)."""

    def __init__(self, topic: str, partition: int, partitions: int) -> None:
        super().__init__(f"topic {topic!r} has no partition {partition}: it has {partitions} "
                         f"(0..{partitions - 1})")
        self.topic = topic
        self.partition = partition
        self.partitions = partitions


class OffsetOutOfRange(KafkaProtocolError):
    """A fetch asked for an offset outside [log start offset, log end offset] of a partition.

    Carries the partition's current bounds when the broker sent them, so the caller can restart from
    the earliest or the latest offset.
    """

    def __init__(self, topic: str, partition: int, offset: int, log_start_offset: int = -1,
                 high_watermark: int = -1) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"offset {offset} is outside the log of {topic}-{partition}"
                         + (f" [{log_start_offset}, {high_watermark}]" if high_watermark >= 0 else ""))
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class TransactionFatalError(KafkaClientError):
    """A transactional producer met an error it cannot recover from (Kafka's fatal errors: the transactional id
    is not authorized, the coordinator answered something no retry mends): close the producer. ``cause`` is the
    error met, if any."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class ProducerFencedError(TransactionFatalError):
    """A newer producer with the same transactional id took over (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH): this
    one is a zombie and must close; nothing it sends or commits will be accepted (Kafka's ProducerFencedException)."""


class TransactionAbortableError(KafkaClientError):
    """The current transaction cannot commit (a send in it failed, the group refused its offsets): call
    abort_transaction(), then begin again. ``cause`` is the error that made it abortable."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class TransactionStateError(KafkaClientError):
    """A transactional call out of order (Kafka's IllegalStateException): send() outside a transaction,
    begin_transaction() twice, commit before init_transactions(), or any transactional call on a producer without
    transactional.id."""
