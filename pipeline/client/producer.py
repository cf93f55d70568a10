"""The Producer of the Kafka paper: ``send(ProducerData(topic, key, messages))``, sync or async.

A sync producer partitions, encodes and sends on the caller's thread: ``send`` returns once the request is
written (acks=0) or acknowledged (acks=1/-1), and raises :class:`ProduceError` for what could not be stored
after the retries. Retriable errors are retried until ``delivery.timeout.ms`` (120 s) after send() took the
messages, as Kafka's producer does since 2.1 (see :mod:`pipeline.client.sender`); then they fail with a
DeliveryTimeoutError naming the last error. An async producer queues messages in a :class:`RecordAccumulator`;
a background thread sends batches of ``batch.size`` messages (or whatever waited ``queue.time`` ms), and reports
each batch's outcome to the ``callback_handler`` -- or, without one, logs failures and counts them in
``failed_messages``.
A sync Producer is used by one thread at a time (no locks on its hot path); an async one by any number.

Null keys: the partitioner is asked once per ProducerData, so the messages of one keyless ProducerData go
together to one random partition. With zookeeper.connect the brokers and leaders come from ZooKeeper
(watched); a keyless ProducerData then goes to a partition that has a leader when some have none (a
broker is down), as Kafka 0.8's producer did; keyed data keeps its partition. Sends use the leaders
already known while the metadata is refreshed in the background, so a slow or stopped ZooKeeper holds
up no send to a known leader.

A ProducerData may name its ``partition`` (the partitioner is then not asked; a partition the topic does not
have raises :class:`UnknownPartitionError`) and give its messages ``timestamps`` and ``headers``; the callback's
ProducerBatch still holds the original message objects.

With ``enable.idempotence=true`` (Kafka's semantics; requires acks=all, which is then the default) the producer
gets a producer id with InitProducerId before its first batch and numbers every batch of a partition; a retry
resends the batch with its numbers, so the broker stores it once (a DUPLICATE_SEQUENCE_NUMBER answer counts as
stored). At most ``max.in.flight.requests.per.connection`` (5) requests are unanswered per broker and a
partition's batches keep their order, retries included. OUT_OF_ORDER_SEQUENCE_NUMBER behind a batch being
retried is retried with it; on its own, like UNKNOWN_PRODUCER_ID or any batch that failed for good, it fails
that batch (ProduceError, or the callback), and the producer then takes a new producer id so that what follows
is numbered from 0 and accepted -- the batch that failed may or may not be stored, as Kafka's producer says too.

With ``transactional.id`` (KIP-98; implies idempotence) the producer writes in transactions:
``init_transactions()`` once, then ``begin_transaction()``, sends, optionally ``send_offsets_to_transaction()``,
and ``commit_transaction()`` or ``abort_transaction()``; send() outside a transaction is refused. The
:class:`~pipeline.client.transaction_manager.TransactionManager` keeps the state and talks to the coordinator;
errors are Kafka's classes: ProducerFencedError / TransactionFatalError (close the producer),
TransactionAbortableError (abort, then begin again).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from pipeline.client.accumulator import PendingBatch, QueueFullError, RecordAccumulator
from pipeline.client.cluster import BrokerDiscovery, Cluster, StaticBrokerList
from pipeline.client.encoder import Encoder, load_instance
from pipeline.client.errors import (
    DeliveryTimeoutError,
    KafkaClientError,
    KafkaConnectionError,
    TransactionAbortedError,
    TransactionStateError,
    UnknownPartitionError,
)
from pipeline.client.idempotence import IdempotenceState
from pipeline.client.partitioner import Partitioner
from pipeline.client.producer_config import ProducerConfig
from pipeline.client.sender import ProduceResult, ProducerBatch, Sender
from pipeline.client.transaction_manager import TransactionManager
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.records import Header, encode_batch, record_size

__all__ = ["CallbackHandler", "MessageSizeTooLargeError", "ProduceError", "ProduceResult", "Producer",
           "ProducerBatch", "ProducerData", "QueueFullError", "UnknownPartitionError"]

log = logging.getLogger(__name__)

# Bytes of a one-partition Produce request besides the record batch, without client id and topic name.
_REQUEST_OVERHEAD = 4 + 8 + 2 + 2 + 2 + 4 + 4 + 2 + 4 + 4 + 4
_BATCH_HEADER = 61
# Upper bound of a record's bytes besides its key and value (length, attributes, deltas, lengths, headers).
_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 1


class ProducerData:
    """Messages for one topic under one key (None allowed): the unit the paper's producer sends.

    Optional, as Kafka's ProducerRecord has them: ``partition`` sends every message there instead of asking
    the partitioner; ``timestamps`` gives each message its CreateTime in ms since the epoch (one int for all
    of them, or one per message; without it a message gets the time it was sent or queued); ``headers`` gives
    each message its record headers, one entry per message: a sequence of ``(str, bytes | None)`` pairs or a
    mapping, or None for none.
    """

    __slots__ = ("topic", "key", "messages", "partition", "timestamps", "headers")

    def __init__(self, topic: str, key: Any = None, messages: Any = (), *, partition: int | None = None,
                 timestamps: int | Sequence[int] | None = None,
                 headers: Sequence[Sequence[Header] | Mapping[str, bytes | None] | None] | None = None) -> None:
        self.topic = topic
        self.key = key
        self.messages = messages if type(messages) is list else (
            list(messages) if isinstance(messages, (tuple, Sequence)) and not isinstance(
                messages, (bytes, bytearray, str, memoryview)) else [messages])
        self.partition = partition
        self.timestamps: list[int] | None = None
        self.headers: list[list[Header] | None] | None = None
        if partition is not None or timestamps is not None or headers is not None:
            self.timestamps, self.headers = _checked_extras(len(self.messages), partition, timestamps, headers)

    def __repr__(self) -> str:
        return f"ProducerData({self.topic!r}, {self.key!r}, {len(self.messages)} messages)"


def _checked_extras(n: int, partition: int | None, timestamps: int | Sequence[int] | None,
                    headers: Sequence[Sequence[Header] | Mapping[str, bytes | None] | None] | None
                    ) -> tuple[list[int] | None, list[list[Header] | None] | None]:
    """The partition, timestamps and headers given for ``n`` messages checked: the timestamps as a list (or
    None), the headers as (str, bytes | None) lists (or None when no message has any); ValueError otherwise."""
    if partition is not None and (type(partition) is not int or partition < 0):
        raise ValueError(f"partition must be an int >= 0, got {partition!r}")
    stamps = None
    if timestamps is not None:
        stamps = [timestamps] * n if isinstance(timestamps, int) else list(timestamps)
        if len(stamps) != n:
            raise ValueError(f"{len(stamps)} timestamps for {n} messages")
        for stamp in stamps:
            if type(stamp) is not int or stamp < 0:
                raise ValueError(f"a timestamp must be an int >= 0 (ms since the epoch), got {stamp!r}")
    checked = None
    if headers is not None:
        checked = [None if h is None else _checked_headers(h) for h in headers]
        if len(checked) != n:
            raise ValueError(f"{len(checked)} header lists for {n} messages")
        if not any(checked):
            checked = None
    return stamps, checked


def _checked_headers(headers: Sequence[Header] | Mapping[str, bytes | None]) -> list[Header]:
    """One message's headers as a list of (str, bytes | None) pairs; anything else is a ValueError."""
    if type(headers) is list:
        # The common case, a list of (str, bytes) tuples, is checked without the ABC checks below.
        for pair in headers:
            if type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not str or (
                    pair[1] is not None and type(pair[1]) is not bytes):
                break
        else:
            return list(headers)
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    checked: list[Header] = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError(f"a header must be a (str, bytes | None) pair, got {pair!r}")
        name, value = pair
        if not isinstance(name, str):
            raise ValueError(f"a header name must be a str, got {name!r}")
        if value is not None and type(value) is not bytes:
            if not isinstance(value, (bytearray, memoryview)):
                raise ValueError(f"header {name!r}: the value must be bytes or None, got {type(value).__name__}")
            value = bytes(value)
        checked.append((name, value))
    return checked


class ProduceError(KafkaClientError):
    """Messages that could not be stored: the error code and, per failed batch, its messages and cause."""

    def __init__(self, failures: Sequence[tuple[ProducerBatch, BaseException]]) -> None:
        self.failures = list(failures)
        first = self.failures[0][1]
        self.error_code = getattr(first, "code", ErrorCode.NETWORK_EXCEPTION
                                  if isinstance(first, KafkaConnectionError) else ErrorCode.UNKNOWN_SERVER_ERROR)
        self.messages = [m for batch, _ in self.failures for m in batch.messages]
        where = ", ".join(sorted({f"{b.topic}-{b.partition}" for b, _ in self.failures}))
        super().__init__(f"{len(self.messages)} messages to {where} were not stored: {first}")


class MessageSizeTooLargeError(ProduceError):
    """A single message does not fit a request of max.request.size bytes; it was not sent."""


class CallbackHandler:
    """Hooks around the async pipeline stages (the paper's CallbackHandler); override what you need.

    on_enqueue runs on the caller's thread; before_send and after_send on the sender thread, with a
    ProducerBatch (topic, partition, messages) and, after sending, a ProduceResult or the exception.
    """

    def on_enqueue(self, data: ProducerData) -> None:
        pass

    def before_send(self, batch: ProducerBatch) -> None:
        pass

    def after_send(self, batch: ProducerBatch, result: ProduceResult | BaseException) -> None:
        pass


class _Run(NamedTuple):
    """Messages on their way into batches: the originals, their encoded values, timestamps and headers."""

    messages: list
    values: list
    timestamps: list | None
    headers: list | None

    def pick(self, indices: list[int]) -> "_Run":
        return _Run([self.messages[i] for i in indices], [self.values[i] for i in indices],
                    None if self.timestamps is None else [self.timestamps[i] for i in indices],
                    None if self.headers is None else [self.headers[i] for i in indices])

    def cut(self, start: int, end: int) -> "_Run":
        return _Run(self.messages[start:end], self.values[start:end],
                    None if self.timestamps is None else self.timestamps[start:end],
                    None if self.headers is None else self.headers[start:end])


class _TopicState:
    __slots__ = ("partitions", "expires")

    def __init__(self, partitions: int, expires: float) -> None:
        self.partitions = partitions
        self.expires = expires


class Producer:
    """Sends ProducerData to the brokers; see the module docstring for sync and async behaviour."""

    def __init__(self, config: Mapping[str, Any] | str | Path | ProducerConfig,
                 callback_handler: CallbackHandler | None = None) -> None:
        self.config = config if isinstance(config, ProducerConfig) else ProducerConfig(config)
        cfg = self.config
        try:
            self.encoder: Encoder = load_instance(cfg["serializer.class"], Encoder, "serializer.class")
            self.key_encoder: Encoder = load_instance(cfg["key.serializer.class"], Encoder, "key.serializer.class")
            self.partitioner: Partitioner = load_instance(cfg["partitioner.class"], Partitioner, "partitioner.class")
        except ValueError as exc:
            from pipeline.config import ConfigError
            raise ConfigError(str(exc)) from None
        self.callback_handler = callback_handler
        discovery: BrokerDiscovery
        if cfg["zookeeper.connect"]:
            from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
            discovery = ZooKeeperBrokerDiscovery(cfg["zookeeper.connect"],
                                                 timeout_s=cfg["zookeeper.connection.timeout.ms"] / 1000.0,
                                                 session_timeout_s=cfg["zookeeper.session.timeout.ms"] / 1000.0)
        else:
            discovery = StaticBrokerList(cfg["metadata.broker.list"])
        self._discovery = discovery
        # Only ZooKeeper reports partitions without a leader that keyless data should avoid.
        self._avoid_leaderless = bool(cfg["zookeeper.connect"])
        self.cluster = Cluster(discovery, client_id=cfg.client_id,
                               timeout_s=max(cfg.connect_timeout_s, cfg.request_timeout_ms / 1000.0 + 1.0),
                               metadata_max_age_s=cfg.metadata_max_age_s, security=cfg.security)
        self._transactions: TransactionManager | None = None
        if cfg.transactional_id is not None:
            self._transactions = TransactionManager(
                self.cluster, cfg.transactional_id, transaction_timeout_ms=cfg.transaction_timeout_ms,
                retries=cfg.retries, retry_backoff_s=cfg.retry_backoff_s,
                request_timeout_s=max(cfg.connect_timeout_s, cfg.request_timeout_ms / 1000.0 + 1.0))
        self._idempotence = self._transactions if self._transactions is not None else IdempotenceState(
            self.cluster, retries=cfg.retries, retry_backoff_s=cfg.retry_backoff_s) if cfg.idempotent else None
        self._sender = Sender(self.cluster, client_id=cfg.client_id, acks=cfg.acks, timeout_ms=cfg.request_timeout_ms,
                              retries=cfg.retries, retry_backoff_s=cfg.retry_backoff_s,
                              delivery_timeout_s=cfg.delivery_timeout_s, max_in_flight=cfg.max_in_flight,
                              idempotence=self._idempotence)
        self._topics: dict[str, _TopicState] = {}
        self._codec = cfg.compression
        self._max_request = cfg.max_request_size
        # Topic -> most record bytes one of its batches may hold (size_for_topic); unlisted: max.request.size's.
        self._batch_limits: dict[str, int] = {}
        self._request_overhead = _REQUEST_OVERHEAD + len(cfg.client_id.encode())
        self.closed = False
        self.sent_messages = 0
        self.failed_messages = 0
        self._accumulator: RecordAccumulator | None = None
        self._thread: threading.Thread | None = None
        self._stats_lock = threading.Lock()
        self._release_on_exit = False
        self._released = False
        if cfg.is_async:
            self._accumulator = RecordAccumulator(cfg.batch_size, cfg.linger_s, cfg.queue_max, cfg.enqueue_timeout_ms)
            self._thread = threading.Thread(target=self._run_sender, name=f"producer-sender-{cfg.client_id}",
                                            daemon=True)
            self._thread.start()

    # -- the paper's API -------------------------------------------------------------------------

    def send(self, data: ProducerData | Iterable[ProducerData]) -> None:
        """Send one ProducerData or a list of them (sync: stored or raised; async: queued)."""
        if self.closed:
            raise KafkaClientError("the producer is closed")
        if self._transactions is not None:
            self._transactions.check_can_send()
        try:
            if self._accumulator is not None:
                if type(data) is ProducerData:
                    self._enqueue(data)
                else:
                    for item in data:
                        self._enqueue(item)
                return
            taken = time.monotonic()  # the start of the messages' delivery timeout
            if type(data) is ProducerData and self._idempotence is None:
                batches = self._batches(data)
                if len(batches) == 1:
                    batches[0].created = taken
                    try:
                        self._sender.send_one(batches[0])
                    except (KafkaClientError, KafkaProtocolError) as exc:
                        self.failed_messages += batches[0].count
                        raise ProduceError([(batches[0], exc)]) from exc
                    self.sent_messages += batches[0].count
                    return
            else:
                batches = [b for item in ([data] if type(data) is ProducerData else data) for b in self._batches(item)]
            for batch in batches:
                batch.created = taken
            self._send_sync(batches)
        except (KafkaClientError, KafkaProtocolError) as exc:
            # Inside a transaction any failed send (a record too large included, as Kafka's doSend) makes it
            # abortable; the sender already said so for what it sent.
            if self._transactions is not None:
                self._transactions.on_send_failures([(data, exc)], unknown_outcome=False)
            raise

    def send_batch(self, topic: str, messages: Sequence[Any], *, keys: Sequence[Any] | None = None,
                   partition: int | None = None, timestamps: int | Sequence[int] | None = None,
                   headers: Sequence[Sequence[Header] | Mapping[str, bytes | None] | None] | None = None) -> None:
        """Send many messages of ``topic`` in one call, for callers that already hold them as lists: what
        ``send`` does with one ProducerData per message, without building those (async: one take of the queue's
        lock per partition).

        ``keys``: one key per message (None: all keyless); ``partition``: all go there, else each keyed message
        goes where the partitioner puts its key and the keyless ones together to one partition, as a keyless
        ProducerData; ``timestamps`` and ``headers`` as in ProducerData. Each partition's messages keep their
        order. The callback handler's on_enqueue gets one ProducerData per partition (its key None when the
        messages' keys differ); its ProducerBatches hold the original messages, as with send().
        """
        if self.closed:
            raise KafkaClientError("the producer is closed")
        if self._transactions is not None:
            self._transactions.check_can_send()
        try:
            self._send_batch(topic, messages, keys, partition, timestamps, headers)
        except (KafkaClientError, KafkaProtocolError) as exc:
            if self._transactions is not None:
                self._transactions.on_send_failures([(topic, exc)], unknown_outcome=False)
            raise

    def _send_batch(self, topic: str, messages: Sequence[Any], keys: Sequence[Any] | None, partition: int | None,
                    timestamps: int | Sequence[int] | None, headers: Sequence[Any] | None) -> None:
        messages = messages if type(messages) is list else list(messages)
        n = len(messages)
        if n == 0:
            return
        stamps, checked = _checked_extras(n, partition, timestamps, headers)
        values = self.encoder.encode_for(topic, messages)
        if keys is None:
            encoded_keys: list = [None] * n
            klen = 0
        else:
            if len(keys) != n:
                raise ValueError(f"{len(keys)} keys for {n} messages")
            encoded_keys = self.key_encoder.encode_all(keys)
            klen = max(map(len, filter(None, encoded_keys)), default=0)
        partitions = self._known_partitions(topic)
        self._check_sizes(topic, encoded_keys, klen, values, checked)
        if partition is not None:
            if partition >= partitions:
                self._check_partition(topic, partition)
            groups: dict[int, list[int] | None] = {partition: None}
        else:
            groups = self._group_by_partition(topic, encoded_keys, partitions)
        taken = time.monotonic()
        batches: list[ProducerBatch] = []
        for target, indices in groups.items():
            run, run_keys = _Run(messages, values, stamps, checked), encoded_keys
            if indices is not None:
                run, run_keys = run.pick(indices), [encoded_keys[i] for i in indices]
            if self.callback_handler is not None:
                data = ProducerData(topic, run_keys[0] if run_keys.count(run_keys[0]) == len(run_keys) else None,
                                    run.messages)
                data.partition, data.timestamps, data.headers = target, run.timestamps, run.headers
                self.callback_handler.on_enqueue(data)
            if self._accumulator is not None:
                self._append_run(topic, target, run_keys, run)
                continue
            pending = PendingBatch(topic, target, taken)
            pending.keys, pending.values, pending.messages = run_keys, run.values, run.messages
            pending.timestamps, pending.headers = run.timestamps, run.headers
            batches.extend(self._encode_pending(pending))
        if batches:
            self._send_sync(batches)

    def _send_sync(self, batches: list[ProducerBatch]) -> None:
        """Send on the caller's thread; ProduceError names what was not stored."""
        failures, _ = self._sender.send(batches)
        failed = sum(b.count for b, _ in failures)
        self.failed_messages += failed
        self.sent_messages += sum(b.count for b in batches) - failed
        if failures:
            raise ProduceError(failures)

    def _append_run(self, topic: str, partition: int, keys: list, run: "_Run") -> None:
        """Queue a run in one piece, or in pieces of queue.buffering.max.messages when it is longer."""
        accumulator = self._accumulator
        assert accumulator is not None
        step = max(accumulator.max_messages, 1)
        n = len(keys)
        for start in range(0, n, step):
            part, part_keys = (run, keys) if n <= step else (run.cut(start, start + step), keys[start:start + step])
            accumulator.append_all(topic, partition, part_keys, part.values, part.messages, part.timestamps,
                                   part.headers)

    def _group_by_partition(self, topic: str, keys: list, partitions: int) -> dict[int, list[int] | None]:
        """Partition -> the positions of the messages bound there (None: all of them, in one partition)."""
        keyless: int | None = None
        groups: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            if key is None:
                if keyless is None:
                    keyless = self._partition(topic, None, partitions)
                target = keyless
            else:
                target = self._partition(topic, key, partitions)
            group = groups.get(target)
            if group is None:
                groups[target] = [i]
            else:
                group.append(i)
        if len(groups) == 1:
            return dict.fromkeys(groups)
        return groups  # type: ignore[return-value]

    # -- transactions (Kafka's KIP-98 producer API) -----------------------------------------------------

    def _manager(self) -> TransactionManager:
        if self._transactions is None:
            raise TransactionStateError("transactional calls need the producer property transactional.id")
        if self.closed:
            raise KafkaClientError("the producer is closed")
        return self._transactions

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.config.max_block_s if timeout is None else timeout)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register transactional.id with its coordinator: get the producer id and a new epoch, which fences
        any older producer with the same id and completes its open transaction. Call once, before the first
        begin_transaction(). ``timeout`` (s; default max.block.ms) bounds the wait: TimeoutError, and calling
        it again resumes. ProducerFencedError / TransactionFatalError: close the producer."""
        self._manager().init_transactions(self._deadline(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: what send() takes until commit or abort belongs to it."""
        self._manager().begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int], group_id: str,
                                    metadata: Mapping[tuple[str, int], str] | None = None,
                                    timeout: float | None = None) -> None:
        """Commit consumer offsets of ``group_id`` ({(topic, partition): next offset to read}) as part of the
        transaction: the group sees them when it commits, never if it aborts."""
        self._manager().send_offsets(offsets, group_id, metadata, self._deadline(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued, then commit. TransactionAbortableError if a send of the transaction failed
        (call abort_transaction()); TimeoutError leaves the commit to be called again."""
        manager = self._manager()
        deadline = self._deadline(timeout)
        manager.begin_commit()
        if not self.flush(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"commit_transaction: queued messages were not sent within {timeout}s")
        manager.commit(deadline)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: queued messages are not sent (each is reported failed), and what was sent is
        never seen by read_committed consumers, nor the offsets sent with it by the group."""
        manager = self._manager()
        deadline = self._deadline(timeout)
        manager.begin_abort()
        if not self.flush(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"abort_transaction: the sender did not finish within {timeout}s")
        manager.abort(deadline)

    @property
    def transaction_state(self) -> str | None:
        """The transactional producer's state (Kafka's client states: READY, IN_TRANSACTION, ...), or None."""
        return None if self._transactions is None else self._transactions.state.name

    def flush(self, timeout: float | None = None) -> bool:
        """Async: send everything queued now and wait for it; False if ``timeout`` (s) passed first."""
        accumulator = self._accumulator
        if accumulator is None:
            return True
        accumulator.begin_flush()
        try:
            return accumulator.wait_empty(timeout)
        finally:
            accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Send what is still queued, wait for it (at most ``timeout`` seconds), and release the connections.

        If the timeout passes first, what is left is reported as failed (callback or log) and TimeoutError raised.
        """
        if self.closed:
            return
        self.closed = True
        try:
            if self._accumulator is not None and self._thread is not None:
                self._accumulator.close()
                self._thread.join(timeout)
                if self._thread.is_alive():
                    left = self._accumulator.abort()
                    lost = TimeoutError(f"producer closed after {timeout}s with messages still unsent")
                    for pending in left:
                        self._report(self._to_batch(pending), lost)
                    raise TimeoutError(f"producer close timed out after {timeout}s; "
                                       f"{sum(len(p) for p in left)} queued messages were not sent")
        finally:
            # A sender still in a send after a timed-out close releases the connections when it ends.
            self._release_on_exit = True
            if self._thread is None or not self._thread.is_alive():
                self._release_connections()

    def _release_connections(self) -> None:
        with self._stats_lock:
            if self._released:
                return
            self._released = True
        if self._transactions is not None:
            self._transactions.close()
        self.cluster.close()
        close_discovery = getattr(self._discovery, "close", None)
        if close_discovery is not None:
            close_discovery()

    def size_for_topic(self, topic: str, max_message_bytes: int) -> None:
        """Fit ``topic``'s batches to a broker that takes batches of at most ``max_message_bytes`` there (the
        topic's max.message.bytes): several records go together only within it, and a request may be as large
        as one such batch needs (max.request.size grows to that, never shrinks). A single record above it is
        still sent, alone, for the broker to judge. For a service such as the mirror, whose records' sizes are
        bounded by their source topic's limit rather than by a setting of its own."""
        self._batch_limits[topic] = max_message_bytes - _BATCH_HEADER
        needed = max_message_bytes + self._request_overhead + len(topic.encode())
        if needed > self._max_request:
            self._max_request = needed

    @property
    def max_request_size(self) -> int:
        """The largest Produce request this producer sends: max.request.size, or more after size_for_topic."""
        return self._max_request

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- partitioning and batching -----------------------------------------------------------------

    def _partitions(self, topic: str) -> int:
        state = self._topics.get(topic)
        now = time.monotonic()
        if state is None or now >= state.expires:
            partitions = self._fetch_partition_count(topic)
            self._topics[topic] = state = _TopicState(partitions, now + self.config.metadata_max_age_s)
            self._sender.forget_routes(topic)
        return state.partitions

    def _partition(self, topic: str, key: bytes | None, partitions: int) -> int:
        partition = self.partitioner.partition(key, partitions)
        if key is not None or not self._avoid_leaderless:
            return partition
        try:
            known = self.cluster.topic(topic).partitions
        except (KafkaClientError, KafkaProtocolError):
            return partition
        chosen = known.get(partition)
        if chosen is not None and chosen.leader >= 0:
            return partition
        available = sorted(p for p, info in known.items() if info.leader >= 0 and p < partitions)
        if not available:
            return partition
        return available[self.partitioner.partition(None, len(available))]

    def _fetch_partition_count(self, topic: str) -> int:
        """The topic's partition count from the brokers, retried like a send: within the delivery timeout."""
        attempt = 0
        deadline = time.monotonic() + self.config.delivery_timeout_s
        while True:
            try:
                return len(self.cluster.partitions_for(topic, allow_auto_create=True))
            except (KafkaClientError, KafkaProtocolError) as exc:
                if not getattr(exc, "retriable", False) or attempt >= self.config.retries:
                    raise
                if time.monotonic() + self.config.retry_backoff_s >= deadline:
                    raise DeliveryTimeoutError(
                        f"the partitions of topic {topic!r} are still unknown after delivery.timeout.ms "
                        f"{self.config.delivery_timeout_s * 1000:.0f}: {exc}", exc) from exc
            attempt += 1
            self.cluster.invalidate()
            time.sleep(self.config.retry_backoff_s)

    def _encoded(self, data: ProducerData) -> tuple[bytes | None, list]:
        key = data.key
        if key is not None:
            key = self.key_encoder.encode(key)
        messages = data.messages
        return key, self.encoder.encode_for(data.topic, messages)

    def _batches(self, data: ProducerData) -> list[ProducerBatch]:
        """Partition and encode one ProducerData into batches that each fit max.request.size."""
        key, values = self._encoded(data)
        n = len(values)
        if n == 0:
            return []
        topic = data.topic
        partition = data.partition
        if partition is None:
            partition = self._partition(topic, key, self._partitions(topic))
        else:
            self._check_partition(topic, partition)
        limit = single_limit = self._max_request - self._request_overhead - len(topic) - _BATCH_HEADER
        if self._batch_limits:
            limit = min(limit, self._batch_limits.get(topic, limit))
        klen = 0 if key is None else len(key)
        estimate = sum(map(len, filter(None, values))) + n * (klen + _RECORD_OVERHEAD)
        timestamps, headers = data.timestamps, data.headers
        if headers is not None:
            estimate += sum(record_size(0, 0, None, None, h) for h in headers)
        if estimate <= limit:
            records = encode_batch(values, None if key is None else [key] * n, timestamps=timestamps, headers=headers,
                                   compression=self._codec)
            if len(records) - _BATCH_HEADER <= limit:
                return [ProducerBatch(topic, partition, key, data.messages, records, n)]
        return self._split(topic, partition, key, _Run(data.messages, values, timestamps, headers), limit,
                           single_limit)

    def _check_partition(self, topic: str, partition: int) -> None:
        """An explicit partition must exist; the topic's partition count is looked up anew before saying no."""
        if partition < self._partitions(topic):
            return
        self._topics.pop(topic, None)
        self.cluster.invalidate()
        partitions = self._partitions(topic)
        if partition >= partitions:
            raise UnknownPartitionError(topic, partition, partitions)

    def _split(self, topic: str, partition: int, key: bytes | None, run: _Run, limit: int,
               single_limit: int | None = None) -> list[ProducerBatch]:
        """Cut ``run`` into batches within ``limit`` bytes of records; a record above it goes alone when it is
        within ``single_limit`` (the request's room), and is refused (MessageSizeTooLargeError) otherwise."""
        batches = []
        single_limit = limit if single_limit is None else single_limit
        start = 0
        values, headers = run.values, run.headers
        n = len(values)
        while start < n:
            size = 0
            end = start
            while end < n:
                grow = record_size(end - start, 0, key, values[end], None if headers is None else headers[end])
                if end > start and size + grow > limit:
                    break
                size += grow
                end += 1
            if size > single_limit:
                too_big = ProducerBatch(topic, partition, key, run.messages[start:end], None, end - start)
                raise MessageSizeTooLargeError([(too_big, KafkaProtocolError(
                    ErrorCode.MESSAGE_TOO_LARGE, f"a message of {size} bytes exceeds max.request.size "
                                                 f"{self._max_request} with the request overhead"))])
            batches.extend(self._encode_fitting(topic, partition, key, run.cut(start, end), limit))
            start = end
        return batches

    def _encode_fitting(self, topic: str, partition: int, key: bytes | None, run: _Run, limit: int
                        ) -> list[ProducerBatch]:
        """Encode; when compression made it bigger than the limit after all, halve and try again."""
        n = len(run.values)
        records = encode_batch(run.values, None if key is None else [key] * n, timestamps=run.timestamps,
                               headers=run.headers, compression=self._codec)
        if len(records) - _BATCH_HEADER <= limit or n == 1:
            return [ProducerBatch(topic, partition, key, run.messages, records, n)]
        half = n // 2
        return (self._encode_fitting(topic, partition, key, run.cut(0, half), limit)
                + self._encode_fitting(topic, partition, key, run.cut(half, n), limit))

    # -- async ------------------------------------------------------------------------------------

    def _enqueue(self, data: ProducerData) -> None:
        values = self.encoder.encode_for(data.topic, data.messages)
        if not values:
            return
        key = data.key
        klen = 0
        if key is not None:
            key = self.key_encoder.encode(key)
            klen = len(key)
        topic = data.topic
        keys = [key] * len(values)
        state = self._topics.get(topic)
        partitions = state.partitions if state is not None and time.monotonic() < state.expires \
            else self._partitions(topic)
        headers = data.headers
        if headers is None:
            limit = self._max_request - self._request_overhead - len(topic) - _BATCH_HEADER - _RECORD_OVERHEAD - klen
            for value in values:
                if value is not None and len(value) > limit:
                    self._check_size(topic, key, value)
        else:
            self._check_sizes(topic, keys, klen, values, headers)
        partition = data.partition
        if partition is None:
            partition = self._partition(topic, key, partitions)
        elif partition >= partitions:
            self._check_partition(topic, partition)
        if self.callback_handler is not None:
            self.callback_handler.on_enqueue(data)
        self._accumulator.append_all(topic, partition, keys, values, data.messages,  # type: ignore[union-attr]
                                     data.timestamps, headers)

    def _known_partitions(self, topic: str) -> int:
        state = self._topics.get(topic)
        return state.partitions if state is not None and time.monotonic() < state.expires else self._partitions(topic)

    def _check_sizes(self, topic: str, keys: list, klen: int, values: list, headers: list | None) -> None:
        """Refuse a record that cannot fit a request before it is queued (MessageSizeTooLargeError): an upper
        bound per record first (``klen``: the longest key), the exact size only for a record that may not fit."""
        limit = self._max_request - self._request_overhead - len(topic) - _BATCH_HEADER - _RECORD_OVERHEAD - klen
        if headers is None:
            for key, value in zip(keys, values):
                if value is not None and len(value) > limit:
                    self._check_size(topic, key, value)
            return
        for key, value, value_headers in zip(keys, values, headers):
            # A header: two varints of at most 5 bytes, at most 4 bytes a character of its name, its value.
            bound = 0 if value is None else len(value)
            if value_headers:
                for name, header_value in value_headers:
                    bound += 10 + 4 * len(name) + (0 if header_value is None else len(header_value))
            if bound > limit:
                self._check_size(topic, key, value, value_headers)

    def _check_size(self, topic: str, key: bytes | None, value: bytes | None,
                    headers: list[Header] | None = None) -> None:
        limit = self._max_request - self._request_overhead - len(topic) - _BATCH_HEADER
        size = record_size(0, 0, key, value, headers)
        if size > limit:
            too_big = ProducerBatch(topic, -1, key, [value], None, 1)
            raise MessageSizeTooLargeError([(too_big, KafkaProtocolError(
                ErrorCode.MESSAGE_TOO_LARGE, f"a message of {size} bytes exceeds max.request.size "
                                             f"{self._max_request} with the request overhead"))])

    def _to_batch(self, pending: PendingBatch) -> ProducerBatch:
        return ProducerBatch(pending.topic, pending.partition, pending.keys[0] if pending.keys else None,
                             pending.messages, None, len(pending.values))

    def _report(self, batch: ProducerBatch, outcome: ProduceResult | BaseException) -> None:
        with self._stats_lock:
            if isinstance(outcome, BaseException):
                self.failed_messages += batch.count
            else:
                self.sent_messages += batch.count
        if self.callback_handler is not None:
            try:
                self.callback_handler.after_send(batch, outcome)
            except Exception:
                log.exception("callback_handler.after_send raised")
        elif isinstance(outcome, TransactionAbortedError):
            log.debug("async producer: %d messages to %s-%d dropped by the transaction's abort",
                      batch.count, batch.topic, batch.partition)
        elif isinstance(outcome, BaseException):
            log.error("async producer: %d messages to %s-%d were not stored: %s",
                      batch.count, batch.topic, batch.partition, outcome)

    def _encode_pending(self, pending: PendingBatch) -> list[ProducerBatch]:
        """Encode a drained batch; if it exceeds max.request.size, split it per run of equal keys to fit."""
        keys, n = pending.keys, len(pending.keys)
        key = keys[0] if keys.count(keys[0]) == n else None
        topic, partition = pending.topic, pending.partition
        limit = self._max_request - self._request_overhead - len(topic) - _BATCH_HEADER
        records = encode_batch(pending.values, None if keys.count(None) == n else keys, timestamps=pending.timestamps,
                               headers=pending.headers, compression=self._codec)
        single_limit = limit
        if self._batch_limits:
            limit = min(limit, self._batch_limits.get(topic, limit))
        if len(records) - _BATCH_HEADER <= limit:
            return [ProducerBatch(topic, partition, key, pending.messages, records, n, pending.created)]
        run = _Run(pending.messages, pending.values, pending.timestamps, pending.headers)
        out, start = [], 0
        for i in range(1, n + 1):
            if i == n or keys[i] != keys[start]:
                out.extend(self._split(topic, partition, keys[start], run.cut(start, i), limit, single_limit))
                start = i
        for batch in out:
            batch.created = pending.created
        return out

    def _run_sender(self) -> None:
        accumulator = self._accumulator
        assert accumulator is not None
        handler = self.callback_handler
        node_of = self._sender.node_of
        while True:
            pending = accumulator.wait_for_batches(1.0, node_of)
            if not pending:
                if accumulator.closed and accumulator.queued == 0:
                    if self._release_on_exit:
                        self._release_connections()
                    return
                continue
            batches: list[ProducerBatch] = []
            for item in pending:
                try:
                    batches.extend(self._encode_pending(item))
                except Exception as exc:
                    self._report(self._to_batch(item), exc)
                    accumulator.release(len(item))
            try:
                if handler is not None:
                    for batch in batches:
                        handler.before_send(batch)
                failures, stored = self._sender.send(batches)
            except Exception as exc:
                failures, stored = [(b, exc) for b in batches], []
            for batch, exc in failures:
                self._report(batch, exc)
            for batch, result in stored:
                self._report(batch, result)
            accumulator.release(sum(b.count for b in batches))
