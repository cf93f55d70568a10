"""The producer's wire side: encode Produce requests for batches, send them to partition leaders, retry.

:class:`ProducerBatch` is one encoded RecordBatch for one topic-partition plus the messages it holds (so
failures can name them). :class:`Sender` groups batches by leader broker into one Produce request per broker
(the paper's multiproduce), sends them, reads the answers when acks != 0, and retries retriable failures after
a metadata refresh and a backoff. It returns what finally failed; it never drops a batch silently.

Retries are bounded by time, as Kafka's since 2.1: a batch fails for good when a non-retriable error comes back,
when ``delivery.timeout.ms`` passed since send() took its first message (its ``created`` time; the batch then
fails with :class:`DeliveryTimeoutError` naming the last error), or when it was retried
``message.send.max.retries`` times (effectively unlimited by default). A broker bounce, a leader election or a
partition without a leader for a while therefore costs time, not messages. Each retry is logged, so that an operator
sees why events are late: one WARNING line per kind of error (the exception, the partitions, the attempt, the
delivery time left), at most one per kind every RETRY_WARNING_INTERVAL_S, the rest counted in the next line.

Produce versions 3-8 (the non-flexible ones) are written directly from cached per-route byte templates rather
than through the generic codec, which is the hot path of a producer; ``encode_produce_request`` is checked
against the generic codec by the unit tests.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from pipeline.client.cluster import Cluster
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import DeliveryTimeoutError, KafkaClientError, KafkaConnectionError
from pipeline.client.idempotence import IdempotenceState
from pipeline.error_text import describe_error
from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import with_producer_fields
from pipeline.records import decode_batch, encode_batch
from pipeline.protocol.codec import encode_request, is_flexible
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.warning_limiter import WarningLimiter

__all__ = ["DeliveryTimeoutError", "RECORD_REFUSALS", "ProducerBatch", "ProduceResult", "Sender",
           "encode_produce_request", "is_record_refusal", "is_retriable"]

_PRODUCE = int(ApiKey.PRODUCE)
_FRAME_HEAD = struct.Struct(">ihhi")  # length, api key, api version, correlation id
_INT32 = struct.Struct(">i")
_INT32_PAIR = struct.Struct(">ii")
_ACKS_TIMEOUT = struct.Struct(">hi")
_COMPRESSION_MASK = 0x07
_SEQUENCE_MASK = 0x7FFFFFFF

log = logging.getLogger(__name__)

# A producer retries every retry.backoff.ms through an outage: one line per kind of error this often, at most.
RETRY_WARNING_INTERVAL_S = 10.0
# Partitions a retry line names; the others are counted.
RETRY_WARNING_PARTITIONS = 10


class ProducerBatch:
    """One RecordBatch bound for ``topic``-``partition``: its encoded bytes, the original messages, and the
    (serialized) key they share (None when null or when the messages have different keys). ``created`` is when
    send() took its first message (time.monotonic; 0.0: when the Sender first sees it), the start of its
    delivery timeout; ``attempts`` counts the sends that failed retriably."""

    __slots__ = ("topic", "partition", "key", "messages", "records", "count", "created", "base_sequence", "attempts")

    def __init__(self, topic: str, partition: int, key: Any, messages: list, records: bytes | None,
                 count: int, created: float = 0.0) -> None:
        self.topic = topic
        self.partition = partition
        self.key = key
        self.messages = messages
        self.records = records
        self.count = count
        self.created = created
        self.base_sequence = -1  # an idempotent producer's number for the first record, once it was sent
        self.attempts = 0

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, {self.count} messages)"


class ProduceResult(NamedTuple):
    """Where a batch was stored: its first offset (-1 with acks=0, which gets no answer)."""

    topic: str
    partition: int
    base_offset: int


def is_retriable(exc: BaseException) -> bool:
    """Whether a send that failed with ``exc`` may succeed when tried again."""
    return bool(getattr(exc, "retriable", False))


# Errors a broker answers when it refuses a batch for what its records are (too large, invalid); it stored none.
RECORD_REFUSALS = frozenset((ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_RECORD,
                             ErrorCode.INVALID_TIMESTAMP))


def is_record_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is a broker's refusal of a batch's records, for good (see RECORD_REFUSALS)."""
    return getattr(exc, "code", None) in RECORD_REFUSALS


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def encode_produce_request(version: int, correlation_id: int, client_id: str | None, acks: int, timeout_ms: int,
                           topics: dict[str, list[tuple[int, bytes]]], transactional_id: str | None = None) -> bytes:
    """A whole Produce request frame (v3-8) for ``topics``: name -> [(partition, record batch bytes)]."""
    if is_flexible(_PRODUCE, version) or version < 3:
        raise ValueError(f"encode_produce_request writes Produce v3-8, not v{version}")
    parts = [b"", b"\xff\xff" if client_id is None else _string(client_id),
             b"\xff\xff" if transactional_id is None else _string(transactional_id),
             _ACKS_TIMEOUT.pack(acks, timeout_ms), _INT32.pack(len(topics))]
    for name, partitions in topics.items():
        parts.append(_string(name))
        parts.append(_INT32.pack(len(partitions)))
        for partition, records in partitions:
            parts.append(_INT32_PAIR.pack(partition, len(records)))
            parts.append(records)
    size = sum(map(len, parts)) + 8
    parts[0] = _FRAME_HEAD.pack(size, _PRODUCE, version, correlation_id)
    return b"".join(parts)


def _rounds(batches: list[ProducerBatch]) -> list[list[ProducerBatch]]:
    """Split batches for one broker into requests that name each partition at most once (a v2 Produce
    request carries one RecordBatch per partition), keeping each partition's batches in order."""
    rounds: list[list[ProducerBatch]] = []
    seen: dict[tuple[str, int], int] = {}
    for batch in batches:
        key = (batch.topic, batch.partition)
        index = seen.get(key, 0)
        seen[key] = index + 1
        if index == len(rounds):
            rounds.append([])
        rounds[index].append(batch)
    return rounds


class _Route(NamedTuple):
    """Cached way to one partition's leader: its connection and the request bytes after the header."""

    node_id: int
    connection: BrokerConnection
    version: int
    middle: bytes  # client id .. partition index: all of a one-batch request except head and records


class Sender:
    """Sends ProducerBatches with retries; owned by one thread at a time (sync caller or async sender thread)."""

    def __init__(self, cluster: Cluster, *, client_id: str, acks: int, timeout_ms: int, retries: int,
                 retry_backoff_s: float, delivery_timeout_s: float = 120.0, max_in_flight: int | None = None,
                 idempotence: IdempotenceState | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.delivery_timeout_s = delivery_timeout_s
        self._clock = clock
        self.max_in_flight = max_in_flight
        self._idempotence = idempotence
        self.client_id = client_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._sleep = sleep
        self._routes: dict[tuple[str, int], _Route] = {}
        self._client_id_bytes = _string(client_id)
        # Produce's TransactionalId: a transactional producer's batches name it, the others send null.
        self.transactional_id: str | None = getattr(idempotence, "transactional_id", None)
        self._acks_timeout = (b"\xff\xff" if self.transactional_id is None else _string(self.transactional_id)) \
            + _ACKS_TIMEOUT.pack(acks, timeout_ms)
        self.requests_sent = 0
        self.retried_batches = 0
        self.retry_warnings = WarningLimiter(log, RETRY_WARNING_INTERVAL_S, clock)

    # -- routes ---------------------------------------------------------------------------------

    def _route(self, topic: str, partition: int) -> _Route:
        route = self._routes.get((topic, partition))
        if route is None:
            connection = self.cluster.leader_connection(topic, partition)
            version = connection.version(_PRODUCE)
            middle = b"".join((self._client_id_bytes, self._acks_timeout, _INT32.pack(1), _string(topic),
                               _INT32_PAIR.pack(1, partition)))
            route = _Route(connection.node_id, connection, version, middle)
            self._routes[(topic, partition)] = route
        return route

    def node_of(self, topic: str, partition: int) -> int | None:
        """The broker a partition's batches last went to (None when not routed yet); looks nothing up."""
        route = self._routes.get((topic, partition))
        return None if route is None else route.node_id

    def forget_routes(self, topic: str | None = None) -> None:
        """Drop cached leaders (of one topic, or all) so the next send looks them up again."""
        if topic is None:
            self._routes.clear()
        else:
            for key in [k for k in self._routes if k[0] == topic]:
                del self._routes[key]

    # -- sending --------------------------------------------------------------------------------

    def send_one(self, batch: ProducerBatch) -> ProduceResult:
        """Send one batch (the sync hot path): retries, then raises the final error."""
        if not batch.created:
            batch.created = self._clock()
        route = self._routes.get((batch.topic, batch.partition))
        if route is not None and route.version <= 8 and route.connection.connected:
            connection = route.connection
            records = batch.records
            correlation_id = connection.next_correlation_id()
            frame = b"".join((_FRAME_HEAD.pack(len(route.middle) + len(records) + 12, _PRODUCE, route.version,
                                               correlation_id), route.middle, _INT32.pack(len(records)), records))
            try:
                connection.send_frame(frame, _PRODUCE, route.version, correlation_id, self.acks != 0)
                self.requests_sent += 1
                if self.acks == 0:
                    return ProduceResult(batch.topic, batch.partition, -1)
                return self._read_one(connection, batch)
            except (KafkaClientError, KafkaProtocolError) as exc:
                if not is_retriable(exc):
                    raise
                final = self._give_up(batch, exc, self._clock())
                if final is exc:
                    raise
                if final is not None:
                    raise final from exc
                self._after_failure([(batch, exc)])
                self.retried_batches += 1
        failures, stored = self.send([batch])
        if failures:
            raise failures[0][1]
        return stored[0][1]

    def _read_one(self, connection: BrokerConnection, batch: ProducerBatch) -> ProduceResult:
        _, body = connection.receive()
        for topic, partition, code, base_offset in _partition_answers(body):
            if topic == batch.topic and partition == batch.partition:
                if code:
                    raise KafkaProtocolError(code, f"producing to {topic}-{partition}")
                return ProduceResult(topic, partition, base_offset)
        connection.close()
        raise KafkaConnectionError(f"broker {connection.host}:{connection.port} did not answer for "
                                   f"{batch.topic}-{batch.partition}")

    def send(self, batches: Sequence[ProducerBatch]
             ) -> tuple[list[tuple[ProducerBatch, BaseException]], list[tuple[ProducerBatch, ProduceResult]]]:
        """Send ``batches`` (one request per leader broker), retrying retriable failures until each batch's
        delivery timeout (or its retries) runs out.

        Returns (failures, stored): the batches that finally failed with their errors, and the others each with
        where it was stored (its own base offset; several batches of one partition each have theirs), in no
        particular order.
        """
        now = self._clock()
        for batch in batches:
            if not batch.created:
                batch.created = now
        idempotence = self._idempotence
        if idempotence is None:
            return self._send_with_retries(batches)
        try:
            deadline = min((b.created for b in batches), default=now) + self.delivery_timeout_s
            self._number(idempotence, batches, deadline)
        except (KafkaClientError, KafkaProtocolError) as exc:
            now = self._clock()
            return [(b, self._expired(b, exc, now) if is_retriable(exc) else exc) for b in batches], []
        failures, stored = self._send_with_retries(batches)
        if failures:
            # Whether the broker stored a batch that failed for good is unknown: number anew (a new id, or a new
            # epoch after the abort). A batch it refused for its records was not stored, and the numbering was
            # closed over it already.
            idempotence.on_send_failures(failures, any(not is_record_refusal(e) for _, e in failures))
        return failures, stored

    @staticmethod
    def _number(idempotence: IdempotenceState, batches: Sequence[ProducerBatch], deadline: float | None = None
                ) -> None:
        """Give the batches sent for the first time their producer id and sequence numbers (as Kafka's
        producer does when a batch first leaves the accumulator); a retried batch keeps its numbers. Getting an
        id is retried until ``deadline`` (monotonic), the delivery timeout of the oldest batch."""
        idempotence.ensure_producer_id(deadline)
        transactional = idempotence.transactional
        if transactional:
            # A partition's first batch in a transaction waits for AddPartitionsToTxn (a failure fails the round).
            idempotence.prepare_send({(b.topic, b.partition) for b in batches if b.base_sequence < 0},  # type: ignore
                                     deadline)
        for batch in batches:
            if batch.base_sequence < 0 and batch.records is not None:
                sequence = idempotence.sequence(batch.topic, batch.partition)
                batch.records = with_producer_fields(batch.records, idempotence.producer_id, idempotence.epoch,
                                                     sequence, transactional)
                batch.base_sequence = sequence
                idempotence.advance(batch.topic, batch.partition, batch.count)

    def _send_with_retries(self, batches: Sequence[ProducerBatch]) -> tuple[
            list[tuple[ProducerBatch, BaseException]], list[tuple[ProducerBatch, ProduceResult]]]:
        results: list[tuple[ProducerBatch, ProduceResult]] = []
        final: list[tuple[ProducerBatch, BaseException]] = []
        now = self._clock()
        pending = []
        for batch in batches:
            # Kafka expires a batch that waited in the accumulator past its delivery timeout without sending it.
            if now - batch.created >= self.delivery_timeout_s:
                final.append((batch, self._expired(batch, None, now)))
            else:
                pending.append(batch)
        while pending:
            failures = self._send_once(pending, results)
            if not failures:
                break
            # A batch of several records refused for what a record is goes again one record a batch (Kafka's
            # split on RECORD_TOO_LARGE), so that only the records the broker refuses fail.
            split = {id(b): self._singles(b) for b, e in failures if is_record_refusal(e) and b.count > 1}
            retry = self._retriable(failures, {(b.topic, b.partition) for b, _ in failures if id(b) in split})
            retrying = {id(b) for b, _ in retry}
            refused = []
            now = self._clock()
            again = []
            for batch, exc in failures:
                if id(batch) in split:
                    again.extend((single, exc) for single in split[id(batch)])
                elif id(batch) not in retrying:
                    final.append((batch, exc))
                    if is_record_refusal(exc):
                        refused.append(batch)
                else:
                    given_up = self._give_up(batch, exc, now)
                    if given_up is None:
                        again.append((batch, exc))
                    else:
                        final.append((batch, given_up))
            if refused and self._idempotence is not None:
                again += self._close_sequence_gaps(refused, final, again)
            if not again:
                break
            self.retried_batches += len(again)
            self._after_failure(again)
            pending = [b for b, _ in again]
        return final, results

    def _singles(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """``batch`` as one batch per record, in order; an idempotent producer's keep the batch's sequence range
        (the broker stored none of it), so the numbering goes on unbroken."""
        header, records = decode_batch(batch.records)  # type: ignore[arg-type]
        singles = []
        for index, (record, message) in enumerate(zip(records, batch.messages)):
            numbered = batch.base_sequence >= 0
            encoded = encode_batch([record.value], [record.key], timestamps=[record.timestamp],
                                   headers=[record.headers] if record.headers else None,
                                   compression=header.attributes & _COMPRESSION_MASK,
                                   producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                                   base_sequence=(batch.base_sequence + index) & _SEQUENCE_MASK if numbered else -1,
                                   transactional=header.is_transactional)
            single = ProducerBatch(batch.topic, batch.partition, record.key, [message], encoded, 1, batch.created)
            single.base_sequence = (batch.base_sequence + index) & _SEQUENCE_MASK if numbered else -1
            single.attempts = batch.attempts
            singles.append(single)
        return singles

    def _close_sequence_gaps(self, refused: list[ProducerBatch], final: list[tuple[ProducerBatch, BaseException]],
                             again: list[tuple[ProducerBatch, BaseException]]) -> list[tuple[ProducerBatch, BaseException]]:
        """After batches the broker refused for good (and so never stored), number the batches behind them in
        their partitions down by the refused records, as Kafka's producer does, so that the broker, still
        expecting the refused batch's sequence, takes them: those in ``again`` in place, and those that failed
        with OUT_OF_ORDER_SEQUENCE_NUMBER only because of the gap taken out of ``final`` to be sent again."""
        idempotence = self._idempotence
        assert idempotence is not None
        resent: list[tuple[ProducerBatch, BaseException]] = []
        for gap in sorted(refused, key=lambda b: -b.base_sequence):
            where = (gap.topic, gap.partition)
            for batch, exc in list(final):
                if ((batch.topic, batch.partition) == where and batch.base_sequence > gap.base_sequence
                        and getattr(exc, "code", None) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
                    final.remove((batch, exc))
                    resent.append((batch, exc))
            for batch, _ in again + resent:
                if (batch.topic, batch.partition) == where and batch.base_sequence > gap.base_sequence:
                    batch.base_sequence -= gap.count
                    batch.records = with_producer_fields(batch.records, idempotence.producer_id,  # type: ignore
                                                         idempotence.epoch, batch.base_sequence)
            idempotence.rewind(gap.topic, gap.partition, gap.count)
        resent.sort(key=lambda item: item[0].base_sequence)
        return resent

    def _give_up(self, batch: ProducerBatch, exc: BaseException, now: float) -> BaseException | None:
        """After a retriable failure of ``batch``: None to retry it, or the error it finally fails with -- ``exc``
        once it was retried message.send.max.retries times, a DeliveryTimeoutError when its delivery timeout
        ends before the backoff does."""
        batch.attempts += 1
        if batch.attempts > self.retries:
            return exc
        if now + self.retry_backoff_s - batch.created >= self.delivery_timeout_s:
            return self._expired(batch, exc, now)
        return None

    def _expired(self, batch: ProducerBatch, last_error: BaseException | None, now: float) -> DeliveryTimeoutError:
        waited_ms = (now - batch.created) * 1000
        tried = (f"{batch.attempts} attempts failed, the last with: {last_error}" if last_error is not None
                 else "it was never sent")
        return DeliveryTimeoutError(
            f"expiring {batch.count} record(s) for {batch.topic}-{batch.partition}: {waited_ms:.0f} ms passed since "
            f"send() took them, delivery.timeout.ms is {self.delivery_timeout_s * 1000:.0f} ({tried})", last_error)

    def _retriable(self, failures: list[tuple[ProducerBatch, BaseException]],
                   split: set[tuple[str, int]] = frozenset()  # type: ignore[assignment]
                   ) -> list[tuple[ProducerBatch, BaseException]]:
        """The failures worth another attempt. For an idempotent producer that includes OUT_OF_ORDER_SEQUENCE_NUMBER
        of a batch that followed a retried (or ``split``) batch of its partition: it failed only because its
        predecessor did, and both are resent in order with their sequence numbers."""
        if self._idempotence is None:
            return [(b, e) for b, e in failures if is_retriable(e)]
        retry = []
        retried: set[tuple[str, int]] = set(split)
        for batch, exc in failures:
            where = (batch.topic, batch.partition)
            if is_retriable(exc) or (where in retried
                                     and getattr(exc, "code", None) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
                retried.add(where)
                retry.append((batch, exc))
        return retry

    def _after_failure(self, failures: list[tuple[ProducerBatch, BaseException]]) -> None:
        """Say why, back off, forget what we knew about the leaders involved, and refresh their metadata."""
        self._warn_retrying(failures)
        topics = set()
        for batch, exc in failures:
            topics.add(batch.topic)
            route = self._routes.pop((batch.topic, batch.partition), None)
            if isinstance(exc, KafkaConnectionError) and route is not None:
                self.cluster.invalidate(route.node_id)
        self.cluster.invalidate()
        self._sleep(self.retry_backoff_s)
        try:
            self.cluster.refresh(sorted(topics))
        except KafkaConnectionError:
            # No broker answered: the next attempt fails fast on the missing leader and retries again.
            pass

    def _warn_retrying(self, failures: list[tuple[ProducerBatch, BaseException]]) -> None:
        """One line per kind of error among ``failures`` (rate-limited per kind): the error, the partitions whose
        batches wait for it, the attempt that failed and the delivery time the soonest to expire has left."""
        by_kind: dict[str, tuple[BaseException, list[ProducerBatch]]] = {}
        for batch, exc in failures:
            code = getattr(exc, "code", None)
            kind = code.name if isinstance(code, ErrorCode) else type(exc).__name__
            by_kind.setdefault(kind, (exc, []))[1].append(batch)
        now = self._clock()
        for kind, (exc, batches) in by_kind.items():
            where = sorted({(b.topic, b.partition) for b in batches})
            named = ", ".join(f"{topic}-{partition}" for topic, partition in where[:RETRY_WARNING_PARTITIONS])
            if len(where) > RETRY_WARNING_PARTITIONS:
                named += f" and {len(where) - RETRY_WARNING_PARTITIONS} more partition(s)"
            left_s = min(b.created for b in batches) + self.delivery_timeout_s - now
            self.retry_warnings.warn(
                self.client_id, kind, "producer %s: retrying %d batch(es) for %s in %.0f ms after attempt %d failed "
                "(%.1f s of delivery.timeout.ms left): %s", self.client_id, len(batches), named,
                self.retry_backoff_s * 1000, max(b.attempts for b in batches), left_s, describe_error(exc))

    def _send_once(self, batches: Sequence[ProducerBatch], results: list[tuple[ProducerBatch, ProduceResult]]
                   ) -> list[tuple[ProducerBatch, BaseException]]:
        failures: list[tuple[ProducerBatch, BaseException]] = []
        by_node: dict[int, tuple[_Route, list[ProducerBatch]]] = {}
        for batch in batches:
            try:
                route = self._route(batch.topic, batch.partition)
            except (KafkaClientError, KafkaProtocolError) as exc:
                failures.append((batch, exc))
                continue
            entry = by_node.get(route.node_id)
            if entry is None:
                by_node[route.node_id] = (route, [batch])
            else:
                entry[1].append(batch)
        waiting = []
        for route, node_batches in by_node.values():
            connection = route.connection
            rounds = _rounds(node_batches)
            # At most max.in.flight requests unanswered; the others leave as answers come in.
            window = self.max_in_flight or len(rounds)
            try:
                connection.connect()
                version = connection.version(_PRODUCE)
                if self.acks == 0:
                    # No answers to wait for: all requests for this broker leave in one write.
                    frames = [self._encode(version, connection.next_correlation_id(), batches) for batches in rounds]
                    connection.send_frame(frames[0] if len(frames) == 1 else b"".join(frames), _PRODUCE, version,
                                          0, False)
                else:
                    for batches in rounds[:window]:
                        self._send_round(connection, version, batches)
            except (KafkaClientError, KafkaProtocolError) as exc:
                failures.extend((b, exc) for b in node_batches)
                continue
            if self.acks == 0:
                self.requests_sent += len(rounds)
                results.extend((b, ProduceResult(b.topic, b.partition, -1)) for b in node_batches)
            else:
                waiting.append((connection, version, rounds, window))
        for connection, version, rounds, window in waiting:
            for index, batches in enumerate(rounds):
                try:
                    _, body = connection.receive()
                    answers = {(t, p): (code, offset) for t, p, code, offset
                               in _partition_answers(body)}
                except KafkaClientError as exc:
                    failures.extend((b, exc) for later in rounds[index:] for b in later)
                    break
                for batch in batches:
                    code, offset = answers.get((batch.topic, batch.partition), (ErrorCode.NETWORK_EXCEPTION, -1))
                    if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and self._idempotence is not None:
                        # Stored before, but the broker no longer remembers where: Kafka's producer takes it as sent.
                        results.append((batch, ProduceResult(batch.topic, batch.partition, -1)))
                    elif code:
                        failures.append((batch, KafkaProtocolError(code, f"producing to {batch.topic}-{batch.partition}")))
                    else:
                        results.append((batch, ProduceResult(batch.topic, batch.partition, offset)))
                if index + window < len(rounds):
                    try:
                        self._send_round(connection, version, rounds[index + window])
                    except KafkaClientError as exc:
                        # The requests still in flight on this connection are lost with it.
                        connection.close()
                        failures.extend((b, exc) for later in rounds[index + 1:] for b in later)
                        break
        return failures

    def _send_round(self, connection: BrokerConnection, version: int, batches: list[ProducerBatch]) -> None:
        correlation_id = connection.next_correlation_id()
        connection.send_frame(self._encode(version, correlation_id, batches), _PRODUCE, version, correlation_id, True)
        self.requests_sent += 1

    def _encode(self, version: int, correlation_id: int, batches: list[ProducerBatch]) -> bytes:
        if not is_flexible(_PRODUCE, version):
            topics: dict[str, list[tuple[int, bytes]]] = {}
            for batch in batches:
                topics.setdefault(batch.topic, []).append((batch.partition, batch.records))
            return encode_produce_request(version, correlation_id, self.client_id, self.acks, self.timeout_ms, topics,
                                          self.transactional_id)
        topic_data: dict[str, list[dict]] = {}
        for batch in batches:
            topic_data.setdefault(batch.topic, []).append({"index": batch.partition, "records": batch.records})
        body = {"transactional_id": self.transactional_id, "acks": self.acks, "timeout_ms": self.timeout_ms,
                "topic_data": [{"name": name, "partition_data": parts} for name, parts in topic_data.items()]}
        return encode_request(_PRODUCE, version, correlation_id, self.client_id, body)


def _partition_answers(body: dict) -> Iterable[tuple[str, int, int, int]]:
    """(topic, partition, error code, base offset) of every partition in a Produce response."""
    for topic in body["responses"]:
        for part in topic["partition_responses"]:
            yield topic["name"], part["index"], part["error_code"], part["base_offset"]
