"""The audit service's readers: what a cluster holds (tier ``datacenter`` or ``offline``) and the AuditCount
records the other tiers publish, each counted into its own checkpoint (:mod:`audit.state`).

A reader is a :class:`~pipeline.client.static_connector.StaticConsumerConnector` over a cluster (every
partition of the topics it follows, new ones included), one thread counting what it hands out and committing
every ``checkpoint_s`` -- the commit writes the offsets and the counts in one record, so a restart counts every
record exactly once. Readers read committed (``isolation.level=read_committed``): the records of aborted transactions
(an exactly-once mirror killed mid-transaction) and the transaction markers are never counted, and nothing is
counted past an open transaction until it ends; a reader's position moves past the markers and aborted batches
after its last record (``KafkaStream.take_passed``), so that a caught-up reader stands at the last stable offset.

A reader never goes blind: a record that cannot be counted *now* (the schema registry unreachable when a new
schema id is met) is read again after a backoff, its position kept; a record that can *never* be counted (not
the wire format, an unknown schema id, another schema, a missing field, ...) is skipped, counted
(``on_skip(reader, reason)``) and logged with its partition and offset; anything else stops the reader with its
``failure`` recorded and the service's stop event set, so that the process exits non-zero.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any, Callable, Sequence

from fastavro.read import SchemaResolutionError

from audit.records import RetriableError, UnreadableRecord, read_audit_count
from audit.state import CheckpointedCounts, CountKey
from pipeline.auditing.latency import LatencyBuckets
from pipeline.auditing.sketch import ids_bytes
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.consumer_stream import ConsumerTimeout
from pipeline.client.static_connector import StaticConsumerConnector
from pipeline.client.topic_filter import TopicFilter
from schemas.events import AUDIT_NAME, load_schema
from schemas.registry_client import SchemaRegistryError
from schemas.serde import AvroDecoder, EventKey, WireFormatError, event_keys, schema_id_of

__all__ = ["AuditCountReader", "ClusterReader", "EventCounter"]

log = logging.getLogger(__name__)

#: Backoff between two attempts at a record that cannot be counted now, doubling up to the last.
RETRY_BACKOFF_S = (0.5, 30.0)
_AUDIT_SCHEMA = f"{load_schema(AUDIT_NAME)['namespace']}.{AUDIT_NAME}"
#: Exceptions of decoding bytes that are not what their schema says.
_UNDECODABLE = (ValueError, EOFError, IndexError, KeyError, TypeError, OverflowError, UnicodeDecodeError,
                SchemaResolutionError)


class ClusterReader:
    """Counts each record ``handle`` is given, committing offsets with the counts every ``checkpoint_s``."""

    def __init__(self, name: str, connector: StaticConsumerConnector, topics: TopicFilter, counts: CheckpointedCounts,
                 handle: Callable[[ConsumerRecord], None], checkpoint_s: float = 5.0,
                 on_skip: Callable[[str, str], None] | None = None,
                 retry_backoff_s: tuple[float, float] = RETRY_BACKOFF_S) -> None:
        self.name = name
        self.connector = connector
        self.counts = counts
        self._topics = topics
        self._handle = handle
        self._count_all: Callable[[list[ConsumerRecord]], tuple[int, Exception | None]] = (
            getattr(handle, "count_all", None) or _one_by_one(handle))
        self._checkpoint_s = checkpoint_s
        self._on_skip = on_skip
        self._backoff = retry_backoff_s
        self._positions: dict[tuple[str, int], int] = {}
        self._thread: threading.Thread | None = None
        self._next_checkpoint = 0.0
        self.failure: BaseException | None = None
        #: What the reader waits for now (a record it retries), None while it reads.
        self.retrying: str | None = None
        self.records = 0
        self.skipped = 0

    def start(self, stop: threading.Event) -> "ClusterReader":
        self._thread = threading.Thread(target=self._run, args=(stop,), name=f"audit-{self.name}", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def positions(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the offset after the last record counted (or skipped), for every partition read
        (with those the checkpoint stood at when it started)."""
        return dict(self._positions)

    def state(self) -> str:
        """``reading``, ``retrying: ...``, ``stopped: ...`` or ``not started``, for the health check."""
        if self.failure is not None:
            return f"stopped: {self.failure}"
        if self._thread is None:
            return "not started"
        if not self._thread.is_alive():
            return "stopped"
        return f"retrying: {self.retrying}" if self.retrying else "reading"

    def _run(self, stop: threading.Event) -> None:
        try:
            self._positions.update(self.counts.load())
            (stream,) = self.connector.create_message_streams_by_filter(self._topics, 1)
            self._next_checkpoint = time.monotonic() + self._checkpoint_s
            while not stop.is_set():
                try:
                    batch = stream.next_batch()
                except ConsumerTimeout:
                    batch = []
                except StopIteration:
                    break
                passed = stream.take_passed()
                if passed:
                    # Read committed: past the markers and aborted transactions after the records counted.
                    positions = self._positions
                    for key, offset in passed.items():
                        if offset > positions.get(key, 0):
                            positions[key] = offset
                if batch and not self._count(batch, stop):
                    break
                if time.monotonic() >= self._next_checkpoint:
                    self._checkpoint_when_due()
            self.checkpoint()
        except Exception as exc:  # noqa: BLE001 -- whatever stops a reader stops the service, loudly
            self.failure = exc
            log.error("audit reader %s stopped: %s", self.name, f"{type(exc).__name__}: {exc}")
            stop.set()
        finally:
            self.connector.shutdown()
            self.counts.close()

    def _count(self, records: list[ConsumerRecord], stop: threading.Event) -> bool:
        """Count ``records`` in order (one that cannot be counted retried or skipped as ``_count_again`` says), each
        partition's position moved past those done before anything else happens (a checkpoint while retrying
        stands at the record retried); False when the service stops meanwhile."""
        start = 0
        while start < len(records):
            done, error = self._count_all(records[start:] if start else records)
            self.records += done
            end = start + done
            self._advance(records[start:end])
            if error is None:
                return True
            if not isinstance(error, (RetriableError, UnreadableRecord)):
                raise error
            if not self._count_again(records[end], error, stop):
                return False
            self._advance(records[end:end + 1])
            start = end + 1
        return True

    def _advance(self, records: list[ConsumerRecord]) -> None:
        # (Plain stores: ``positions`` copies the dict whole, which no other thread interleaves with.)
        positions = self._positions
        for record in records:
            positions[(record.topic, record.partition)] = record.offset + 1

    def _count_again(self, record: ConsumerRecord, error: Exception, stop: threading.Event) -> bool:
        """After ``record`` could not be counted (``error``): retry it with backoff while that cannot be done now,
        skip it when it can never be; True once counted or skipped, False when the service stops meanwhile."""
        backoff = self._backoff[0]
        where = f"{record.topic}-{record.partition}@{record.offset}"
        while isinstance(error, RetriableError):
            if self.retrying is None:
                log.warning("audit reader %s: cannot count %s now, retrying (every %g s at most): %s",
                            self.name, where, self._backoff[1], error)
            self.retrying = f"{where}: {error}"
            self._checkpoint_when_due()
            if stop.wait(backoff):
                return False
            backoff = min(backoff * 2, self._backoff[1])
            try:
                self._handle(record)
            except (RetriableError, UnreadableRecord) as again:
                error = again
            else:
                self.records += 1
                break
        if isinstance(error, UnreadableRecord):
            self.skipped += 1
            log.warning("audit reader %s skipped %s, it can never be counted (%s): %s", self.name, where,
                        error.reason, error.detail)
            if self._on_skip is not None:
                self._on_skip(self.name, error.reason)
        if self.retrying is not None:
            log.info("audit reader %s counts again from %s", self.name, where)
            self.retrying = None
        return True

    def _checkpoint_when_due(self) -> None:
        if time.monotonic() >= self._next_checkpoint:
            self.checkpoint()
            self._next_checkpoint = time.monotonic() + self._checkpoint_s

    def checkpoint(self) -> None:
        """Write the counts and the offsets they include (a commit of what was handed out so far); with nothing
        new, drop the windows past retention."""
        positions = dict(self._positions)
        if not (positions and self.connector.commit_offsets(positions)):
            self.counts.expire()


def _one_by_one(handle: Callable[[ConsumerRecord], None]) -> Callable[[list[ConsumerRecord]],
                                                                     tuple[int, Exception | None]]:
    """``count_all`` of a handler of one record at a time: (records handled, the error of the next or None)."""
    def count_all(records: list[ConsumerRecord]) -> tuple[int, Exception | None]:
        for n, record in enumerate(records):
            try:
                handle(record)
            except Exception as exc:  # noqa: BLE001 -- the reader raises what is not Retriable/Unreadable
                return n, exc
        return len(records), None
    return count_all


class EventCounter:
    """Counts the events a cluster holds under (tier, topic, datacenter, window), ids into the sketch, and
    observes each event's age as the audit sees it. A record that is not an event is skipped.

    Batch-shaped: ``count_all`` reads the header of each record of a fetched batch, sums them per window and
    hands the sums to the counts and the ages to the latency histogram once."""

    def __init__(self, tier: str, counts: CheckpointedCounts, window_ms: int,
                 observe_latencies: Callable[[str, str, list[float]], None] | None = None) -> None:
        self.tier = tier
        self.counts = counts
        self.window_ms = window_ms
        self._observe = observe_latencies

    def __call__(self, record: ConsumerRecord) -> None:
        _, error = self.count_all([record])
        if error is not None:
            raise error

    def count_all(self, records: Sequence[ConsumerRecord]) -> tuple[int, UnreadableRecord | None]:
        """Count ``records`` in order up to the first that is not an event: (how many were counted, why the next
        one cannot be -- None when all were)."""
        values = [record.value for record in records]
        error = None
        if None in values:
            values = values[:values.index(None)]
            error = UnreadableRecord("null value", "a record without a value")
        found: list[EventKey] = []
        for key in event_keys(values):  # type: ignore[arg-type]
            if key is None:
                error = UnreadableRecord("not an event", "no EventHeader in the Confluent wire format")
                break
            found.append(key)
        try:
            ids = ids_bytes([key.event_id for key in found])
        except ValueError:
            ids, bad, error = self._ids_up_to_a_bad_one(found)
            found = found[:bad]
        if not found:
            return 0, error
        counted = records[:len(found)]
        window_ms = self.window_ms
        tier = self.tier
        times = [key.event_time for key in found]
        wheres = [(tier, record.topic, key.datacenter, t - t % window_ms)
                  for record, key, t in zip(counted, found, times)]
        sizes = [len(value) for value in values[:len(found)]]  # type: ignore[arg-type]
        for n, record in enumerate(counted):
            if record.key is not None:
                sizes[n] += len(record.key)
        if wheres.count(wheres[0]) == len(wheres):  # the usual batch: one partition, one window
            members = {wheres[0]: range(len(found))}
        else:
            members = {}
            for n, where in enumerate(wheres):
                members.setdefault(where, []).append(n)  # type: ignore[attr-defined]
        self.counts.count_all({where: (len(of), sum([sizes[n] for n in of]), [ids[16 * n:16 * n + 16] for n in of])
                               for where, of in members.items()})
        if self._observe is not None:
            now = time.time()
            ages: dict[str, list[float]] = {}
            for record, t in zip(counted, times):
                ages.setdefault(record.topic, []).append(now - t / 1000)
            for topic, seconds in ages.items():
                self._observe(topic, tier, seconds)
        return len(found), error

    @staticmethod
    def _ids_up_to_a_bad_one(found: list[EventKey]) -> tuple[bytes, int, UnreadableRecord]:
        """The ids before the first that is not a UUID's text, its index, and why its record is no event."""
        ids = []
        for n, key in enumerate(found):
            try:
                ids.append(ids_bytes([key.event_id]))
            except ValueError:
                return b"".join(ids), n, UnreadableRecord("not an event", f"event id {key.event_id!r} is not a UUID")
        raise AssertionError("ids_bytes refused the ids it accepts one by one")


class AuditCountReader:
    """Adds each AuditCount record of the other tiers to the counts (:func:`audit.records.read_audit_count`); a
    copy of a record already counted (re-published after a retry, or mirrored into another cluster's audit topic:
    the same recordId) is counted once."""

    def __init__(self, counts: CheckpointedCounts, decoder: AvroDecoder, audit_topic: str,
                 own_tiers: frozenset[str], window_ms: int,
                 observe_latency: Callable[[str, str, LatencyBuckets], None] | None = None) -> None:
        self.counts = counts
        self._observe_latency = observe_latency
        self._decoder = decoder
        self._topic = audit_topic
        self._own_tiers = own_tiers
        self._window_ms = window_ms

    def __call__(self, record: ConsumerRecord) -> None:
        value = record.value
        if value is None:
            raise UnreadableRecord("null value", "a record without a value")
        audit = read_audit_count(self._decode(value), self._window_ms)
        if audit.tier in self._own_tiers:
            return
        # A record's copies share its recordId; one without (written by another tool) is known by its bytes.
        digest = audit.record_id or hashlib.blake2b(value, digest_size=16).hexdigest()
        if not self.counts.first_seen(digest, audit.window_start):
            return
        if audit.latency is not None and self._observe_latency is not None:
            self._observe_latency(audit.topic, audit.tier, audit.latency)
        for measure, counted in audit.measures:
            self.counts.add((measure, audit.topic, audit.datacenter, audit.window_start), counted)

    def _decode(self, value: bytes) -> dict[str, Any]:
        """The AuditCount in ``value``; RetriableError while the registry cannot be asked, UnreadableRecord when it
        is not an AuditCount in the Confluent wire format."""
        try:
            schema_id = schema_id_of(value)
        except WireFormatError as exc:
            raise UnreadableRecord("not in the Confluent wire format", str(exc)) from None
        try:
            writer = self._decoder.registry.schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.status in (404, 422) or exc.code in (40403, 40401):
                raise UnreadableRecord("unknown schema id", f"schema id {schema_id}: {exc.message}") from None
            raise RetriableError(str(exc)) from None
        name = writer.parsed.get("name") if isinstance(writer.parsed, dict) else None
        if name != _AUDIT_SCHEMA:
            raise UnreadableRecord("another schema", f"schema id {schema_id} is {name or 'not a record'}, "
                                                     f"not {_AUDIT_SCHEMA}")
        try:
            audit = self._decoder.decode(value, self._topic)
        except SchemaRegistryError as exc:
            raise RetriableError(str(exc)) from None
        except _UNDECODABLE as exc:
            raise UnreadableRecord("undecodable value", f"{type(exc).__name__}: {exc}") from None
        if not isinstance(audit, dict):
            raise UnreadableRecord("another schema", f"schema id {schema_id} decodes to a {type(audit).__name__}")
        return audit
