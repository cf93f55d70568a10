"""The mirror service: every whitelisted topic of the source clusters copied into the target, at least once or
(exactly.once) exactly once.

Per source cluster one :class:`~pipeline.client.ConsumerConnector` joins the mirror group in that source's
ZooKeeper (so several mirror processes share the partitions by the paper's Algorithm 1, and the survivors
take over those of one that dies) and ``num.streams`` threads read its streams. A source given by its
brokers is read whole by one process through a
:class:`~pipeline.client.static_connector.StaticConsumerConnector`, its offsets in a file under state.dir. Each record goes to the
target partition with the source partition's number, with its key, value, headers, timestamp and three
lineage headers (:mod:`pipeline.lineage`), through one async, idempotent, acks=all Producer.

No loss: the connector never commits on its own (``acknowledge_on_next=False``); the mirror commits per
source partition the lowest offset the target has not acknowledged (:mod:`mirror.tracker`), every
offset.commit.interval.ms, before a rebalance releases a partition, and at shutdown -- each time after the
tier-mirror audit counts of everything acknowledged so far are published, so that a committed record is always
counted (a mirror killed before its commit sends those records again, and they are counted again: duplicates
the audit names as such, never a loss). The producer retries
retriable errors (the target down) practically forever, so nothing is committed while the target is down
and mirroring resumes by itself. A record the target refuses for good (too large for the target topic, invalid
there) is quarantined (:mod:`mirror.quarantine`, under state.dir): kept whole with its lineage and the error,
counted (``mirror_records_quarantined_total``, a tier-mirror quarantine AuditCount) and acknowledged, so the
mirror goes on with the records after it instead of stopping at it after every restart. Target topics are
sized for the largest record their sources hold plus the lineage headers (:mod:`mirror.topics`), and the
producer's requests with them. Any other error that reaches the mirror is not retriable and stops it. Offsets
the source's retention deleted before they were mirrored stop it too, naming the partition and the count,
unless skip.lost.offsets is set (then each gap is counted and reported).

Before a rebalance releases a partition the mirror waits until every stream thread of that source has
finished handing the record it took (no record of a released partition is tracked after it), waits for
the producer to flush, and commits what was acknowledged.

Exactly once (exactly.once=true, :mod:`mirror.transactions`): each source has its own transactional producer
instead, and each commit -- at the same moments -- commits that source's transaction: the records acknowledged,
their tier-mirror audit counts and the source offsets after them, kept in the target (group GROUP.SOURCE). The
transaction's lock stands in for the barrier: a stream thread holds it while it hands one record over, a commit
holds it throughout. A claimed partition starts at its offset in the target. A failed commit aborts and stops the
mirror, whose restart reads on from the target's offsets; a record the target refuses for good is quarantined and
its transaction aborted the same way, the record skipped unsent after the restart.
"""

from __future__ import annotations

import logging
import threading
import time
from itertools import groupby, repeat
from operator import itemgetter
from typing import Any, Iterator, NamedTuple, Sequence

from kazoo.exceptions import KazooException

from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.consumer_connector import ConsumerConnector, ConsumerRebalanceListener
from pipeline.client.consumer_stream import ConsumerTimeout, KafkaStream
from pipeline.client.offset_store import FileOffsetStore
from pipeline.client.encoder import Encoder
from pipeline.client.errors import KafkaClientError
from pipeline.client.producer import CallbackHandler, MessageSizeTooLargeError, Producer, ProducerData
from pipeline.client.rebalance import TopicPartition
from pipeline.client.sender import ProducerBatch, is_record_refusal
from pipeline.client.static_connector import StaticConsumerConnector
from pipeline.client.topic_filter import whitelist_except
from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
from pipeline.lineage import LineageStamp, lineage_overhead
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.records import Header
from pipeline.security.client_settings import security_settings
from pipeline.testing_faults import Faults
from pipeline.zk import layout
from schemas.registry_client_settings import RegistryClientSettings
from schemas.serde import event_key
from mirror.audit import MirrorAudit
from mirror.config import MirrorConfig
from mirror.metrics import MirrorMetrics
from mirror.quarantine import MirrorQuarantine, read_quarantine
from mirror.topics import BrokerSourceTopics, MirrorTopicError, SourceTopics, TopicSync, ZooKeeperSourceTopics
from mirror.tracker import Gap, OffsetTracker, Rewind, SourcePartition
from mirror.transactions import COMMIT_ERRORS, FENCED_ERRORS, SourceTransactions

__all__ = ["LostOffsetsError", "MirrorError", "MirrorService"]

log = logging.getLogger(__name__)

# A commit that failed for one of these is retried at the next interval.
_COMMIT_ERRORS = (KazooException, OSError)
# How long the target may acknowledge nothing of the records in flight before the mirror says so (and again
# every as long while it lasts): this many seconds, or commit intervals if that is shorter.
_STALL_WARNING_S = 10.0

# How often the lag of the partitions is asked for while nothing was mirrored since the last time (else every commit).
_IDLE_LAG_INTERVAL_S = 30.0

# Longest wait for the audit counts to be published before a commit (none is made without them).
_AUDIT_PUBLISH_TIMEOUT_S = 10.0

# Longest wait, before a release, for the stream threads to finish the record they hold.
_BARRIER_TIMEOUT_S = 10.0


class MirrorError(Exception):
    """What stopped the mirror: a send the target refused for good, lost offsets, a target topic unfit."""


class LostOffsetsError(MirrorError):
    """Offsets of a source partition were deleted by retention before they were mirrored."""

    def __init__(self, gap: Gap) -> None:
        where = gap.where
        super().__init__(f"source {where.source}: {where.topic}-{where.partition} offsets {gap.start}..{gap.end - 1} "
                         f"({gap.lost} records) were deleted by the source's retention before they were mirrored; "
                         f"restart with skip.lost.offsets=true (--skip-lost-offsets) to skip them")
        self.gap = gap


class _Stopped(Exception):
    """The mirror stopped while a stream thread waited (for the target)."""


class _Pending(NamedTuple):
    """One record on its way to the target: where it came from and the record as it was read (what acknowledging
    or quarantining it needs). Built with ``_pending`` from the source partition and the ConsumerRecord."""

    where: SourcePartition
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header]

    @property
    def size(self) -> int:
        """Bytes of key and value."""
        key, value = self.key, self.value
        return (0 if key is None else len(key)) + (0 if value is None else len(value))


_new_tuple = tuple.__new__
_WHERE, _OFFSET, _TIMESTAMP, _KEY, _VALUE = (itemgetter(i) for i in (0, 3, 4, 5, 6))


def _pending(where: SourcePartition, records: list[ConsumerRecord]) -> list[_Pending]:
    """The records of ``where`` as _Pending, each built in C from the ConsumerRecord."""
    return list(map(_new_tuple, repeat(_Pending), map((where,).__add__, records)))


def _runs(messages: list[_Pending]) -> Iterator[tuple[SourcePartition, list[_Pending]]]:
    """The messages of one target batch in runs of the same source partition (several sources share a target
    partition)."""
    for where, run in groupby(messages, _WHERE):
        yield where, list(run)


def _sizes(messages: Sequence[_Pending]) -> list[int]:
    return [(0 if key is None else len(key)) + (0 if value is None else len(value))
            for _, _, _, _, _, key, value, _ in messages]


def take_batch(stream: KafkaStream) -> tuple[str, int, list[ConsumerRecord]]:
    """The next records of one source partition from ``stream`` (what is left of the record batch it is handing
    out), in offset order. The one place where the mirror reads its streams."""
    records = stream.next_batch()
    first = records[0]
    return first.topic, first.partition, records


def hand_off(producer: Producer, topic: str, partition: int, messages: list[_Pending], stamp: LineageStamp, *,
             transactional: bool = False) -> list[tuple[_Pending, MessageSizeTooLargeError]]:
    """Give the records of one source partition to the producer for the same partition of the target, each with its
    key, value, timestamp and headers and this hop's lineage; the records refused before sending (larger than the
    target takes), with why. The one place where the mirror hands records to its producers.

    A refused record leaves the whole list unsent; a ``transactional`` producer's transaction can then only abort,
    so only the record refused is returned; otherwise the others are sent one by one and each refused one returned.
    """
    headers = stamp.headers
    timestamps = list(map(_TIMESTAMP, messages))
    if min(timestamps) >= 0:
        try:
            producer.send_batch(topic, messages, keys=list(map(_KEY, messages)), partition=partition,
                                timestamps=timestamps, headers=[headers(m.headers, m.offset) for m in messages])
            return []
        except MessageSizeTooLargeError as exc:
            if transactional:
                values = {id(value) for batch, _ in exc.failures for value in batch.messages}
                found = [(m, exc) for m in messages if id(m.value) in values]
                if not found:
                    raise
                return found[:1]
    refused = []
    for message in messages:
        timestamp = message.timestamp
        try:
            producer.send(ProducerData(topic, message.key, [message], partition=partition,
                                       timestamps=[timestamp] if timestamp >= 0 else None,
                                       headers=[headers(message.headers, message.offset)]))
        except MessageSizeTooLargeError as exc:
            refused.append((message, exc))
    return refused


class _PendingValues(Encoder):
    """The producer's serializer: a _Pending's value, already bytes (or an encoded AuditCount's, exactly.once)."""

    def encode(self, message: _Pending) -> bytes | None:
        return message.value

    def encode_all(self, messages: Sequence[_Pending]) -> list:
        return [m.value for m in messages]


class _SourcePartitionState:
    """What the records of one source partition share: its SourcePartition and this hop's lineage stamp."""

    __slots__ = ("where", "stamp")

    def __init__(self, where: SourcePartition, cluster: bytes) -> None:
        self.where = where
        self.stamp = LineageStamp(cluster, where.partition)


class _StreamThread:
    """One stream of one source and the thread reading it; ``turns`` counts the records it finished."""

    def __init__(self, source: str, stream: KafkaStream) -> None:
        self.source = source
        self.stream = stream
        self.turns = 0
        #: True once the record taken last is tracked (a release need not wait for this thread).
        self.tracked = True
        self.thread: threading.Thread | None = None


class _Source(ConsumerRebalanceListener):
    """One source cluster: its connector, its stream threads, and what its rebalances do to the tracker.

    A source given by its ZooKeeper joins the mirror group there (a ConsumerConnector); one given by its
    brokers is read whole by this process (a StaticConsumerConnector, offsets in a locked file)."""

    def __init__(self, name: str, service: "MirrorService") -> None:
        config = service.config
        self.name = name
        self.service = service
        self.encoded_name = name.encode()
        #: (topic, partition) -> what its records share, made on first use.
        self.partitions: dict[tuple[str, int], _SourcePartitionState] = {}
        self.threads: list[_StreamThread] = []
        #: exactly.once: this source's transactions (mirror.transactions.SourceTransactions), else None.
        self.txn: Any = None
        #: The producer of this source's records: its transactional one, or the mirror's shared one.
        self.producer: Producer | None = None
        self.connector: ConsumerConnector | StaticConsumerConnector
        self.topics: SourceTopics
        if name in config.zookeeper_sources:
            self.connector = ConsumerConnector(config.consumer_config(name), acknowledge_on_next=False,
                                               rebalance_listener=self)
            discovery: Any = ZooKeeperBrokerDiscovery(self.connector.zookeeper)
            self.offsets_at = (f"{layout.offsets_path(config['group.id'], '<topic>')} in that source's "
                               f"ZooKeeper")
        else:
            self.connector = StaticConsumerConnector(config.consumer_config(name),
                                                     FileOffsetStore(config.offsets_file(name)),
                                                     rebalance_listener=self)
            discovery = StaticBrokerList(config.broker_sources[name])
            self.offsets_at = f"its offset in {config.offsets_file(name)} (with the mirror stopped)"
        self.admin = AdminClient(Cluster(discovery, client_id="mirror-source", security=self.connector.config.security),
                                 close_cluster=True)
        if name in config.zookeeper_sources:
            self.topics = ZooKeeperSourceTopics(self.connector.zookeeper, self.admin)  # type: ignore[union-attr]
        else:
            self.topics = BrokerSourceTopics(self.admin)

    def partition(self, topic: str, partition: int) -> _SourcePartitionState:
        state = self.partitions.get((topic, partition))
        if state is None:
            state = self.partitions[(topic, partition)] = _SourcePartitionState(
                SourcePartition(self.name, topic, partition), self.encoded_name)
        return state

    def before_starting_fetchers(self, partitions: dict[TopicPartition, int | None]
                                 ) -> dict[TopicPartition, int | None] | None:
        """Track the claimed partitions from their committed offsets: in the source (at least once) or, exactly
        once, in the target (returned: where the connector starts them)."""
        starts = None
        if self.txn is not None:
            try:
                partitions = starts = self.txn.start_offsets(partitions)
            except Exception as exc:
                # Never read a partition from anywhere but its offset in the target.
                self.service.fail(MirrorError(f"source {self.name}: cannot read the offsets committed in the target "
                                              f"(group {self.txn.group}): {exc}"))
                raise
        for (topic, partition), committed in partitions.items():
            self.service.tracker.start(SourcePartition(self.name, topic, partition), committed)
        return starts

    def before_releasing_partitions(self, partitions: list[TopicPartition]) -> None:
        self.service.release(self, [SourcePartition(self.name, t, p) for t, p in partitions])


class MirrorService(CallbackHandler):
    """Mirrors the sources into the target until ``run``'s stop event is set or an error stops it."""

    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or MirrorMetrics()
        self.tracker = OffsetTracker()
        self.skip_lost = bool(config["skip.lost.offsets"])
        #: Gaps skipped (skip.lost.offsets=true), in the order met.
        self.gaps: list[Gap] = []
        self.mirrored = 0
        self._failure: MirrorError | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._sources: list[_Source] = []
        self._producer: Producer | None = None
        self._topics: TopicSync | None = None
        self._target_cluster: Cluster | None = None
        self._target_discovery: Any = None
        self._audit: MirrorAudit | None = None
        self._lag_labels: set[tuple[str, str, str]] = set()
        self._drop = Faults.of(config).drop_event_ids
        quarantine_dir = config.quarantine_dir()
        self.quarantine = MirrorQuarantine(quarantine_dir) if quarantine_dir is not None else None
        self.exactly_once = config.exactly_once
        #: exactly.once: (source, topic, partition, offset) of the records quarantined before, skipped unsent (their
        #: transaction was aborted when the target refused them).
        self._quarantined: dict[tuple[str, str, int, int], str] = {}
        #: Topics whose target batches the producer was fitted to (Producer.size_for_topic).
        self._sized_topics: set[str] = set()

    # -- running -----------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Mirror until ``stop`` is set (then finish what is in flight, commit, leave) or an error (MirrorError)."""
        config = self.config
        watcher = threading.Thread(target=self._wake_on, args=(stop,), name="mirror-stop", daemon=True)
        watcher.start()
        try:
            self._start()
            interval_s = config["offset.commit.interval.ms"] / 1000
            # The producer retries a target that is away without a word: say so while nothing is acknowledged.
            acknowledged, stalled_since, warned_at = self.mirrored, time.monotonic(), time.monotonic()
            lag_at, lag_mirrored = float("-inf"), -1
            while not self._wake.wait(interval_s):
                try:
                    self.commit()
                except _COMMIT_ERRORS as exc:
                    # A source's ZooKeeper (or offsets file) slow or away: the next commit writes the offsets then.
                    self.metrics.errors.labels("CommitFailed").inc()
                    log.warning("offset commit failed (retried at the next interval): %r", exc)
                now = time.monotonic()
                # Asking every source for its latest offsets costs requests: while nothing moves, less often.
                if self.mirrored != lag_mirrored or now - lag_at >= _IDLE_LAG_INTERVAL_S:
                    lag_at, lag_mirrored = now, self.mirrored
                    self._update_lag()
                outstanding = self.tracker.outstanding()
                if self.mirrored != acknowledged or not outstanding:
                    acknowledged, stalled_since, warned_at = self.mirrored, now, now
                elif now - warned_at >= min(_STALL_WARNING_S, 10 * interval_s):
                    warned_at = now
                    log.warning("the target (%s) has acknowledged none of %d records in flight for %.0f s; the "
                                "producer keeps retrying", config["target.zookeeper.connect"]
                                or config["target.bootstrap.servers"], outstanding, now - stalled_since)
        finally:
            self._shutdown()
            stop.set()
        if self._failure is not None:
            raise self._failure

    def _wake_on(self, stop: threading.Event) -> None:
        stop.wait()
        self._wake.set()

    def _start(self) -> None:
        config = self.config
        self._target_cluster = self._open_target_cluster()
        if not self.exactly_once:
            self._producer = Producer({**config.producer_config().as_dict(), "serializer.class": _PendingValues()},
                                      self)
        for name in sorted(config.sources):
            self._sources.append(_Source(name, self))
        self._start_producers()
        self._topics = TopicSync({s.name: s.topics for s in self._sources},
                                 AdminClient(self._target_cluster), config["topic.config.exclude"],
                                 header_allowance=max(lineage_overhead(name) for name in config.sources))
        if self.quarantine is None:
            log.warning("no state.dir: a record the target refuses for good cannot be quarantined and stops the "
                        "mirror")
        self._start_audit()
        topics = whitelist_except(config["whitelist"], config["blacklist"])
        for source in self._sources:
            streams = source.connector.create_message_streams_by_filter(topics, config["num.streams"])
            for index, stream in enumerate(streams):
                state = _StreamThread(source.name, stream)
                state.thread = threading.Thread(target=self._run_stream, args=(source, state),
                                                name=f"mirror-{source.name}-{index}", daemon=True)
                source.threads.append(state)
                state.thread.start()
        log.info("mirroring %s from %s into %s as group %s", config["whitelist"],
                 ", ".join(f"{n}={c}" for n, c in sorted(config.sources.items())),
                 config["target.zookeeper.connect"] or config["target.bootstrap.servers"], config["group.id"])

    def _start_producers(self) -> None:
        """One shared producer (at least once), or one transactional producer per source (exactly once), each
        fencing its predecessor before anything is read."""
        assert self._target_cluster is not None
        if not self.exactly_once:
            for source in self._sources:
                source.producer = self._producer
            return
        self._quarantined = self._load_quarantined()
        for source in self._sources:
            # Read on the source's rebalancing thread: a client of its own.
            admin = AdminClient(self._open_target_cluster(f"mirror-offsets-{source.name}"), close_cluster=True)
            source.txn = SourceTransactions(source.name, self.config, self, _PendingValues(), admin)
            source.producer = source.txn.producer
            source.txn.start()

    def _load_quarantined(self) -> dict[tuple[str, str, int, int], str]:
        if self.quarantine is None:
            return {}
        found = {}
        for source in self.config.sources:
            path = self.quarantine.path(source)
            if path.exists():
                found.update(((source, r["topic"], r["partition"], r["offset"]), r["reason"])
                             for r in read_quarantine(path))
        return found

    def _producers(self) -> list[Producer]:
        if self._producer is not None:
            return [self._producer]
        return [s.producer for s in self._sources if s.producer is not None]

    def _open_target_cluster(self, client_id: str = "mirror-admin") -> Cluster:
        """A client of the target; its connections are its own (a Cluster's are not shared between threads)."""
        config = self.config
        if config["target.zookeeper.connect"]:
            if self._target_discovery is None:
                self._target_discovery = ZooKeeperBrokerDiscovery(config["target.zookeeper.connect"])
            discovery: Any = self._target_discovery
        else:
            discovery = StaticBrokerList(config["target.bootstrap.servers"])
        return Cluster(discovery, client_id=client_id, security=config.producer_config().security)

    def fail(self, error: MirrorError) -> None:
        """Stop the mirror with ``error`` (the first one wins)."""
        with self._lock:
            if self._failure is None:
                self._failure = error
                log.error("mirror stopping: %s", error)
        self.metrics.errors.labels(type(error).__name__).inc()
        self._stopping.set()
        self._wake.set()

    @property
    def failure(self) -> MirrorError | None:
        return self._failure

    # -- the stream threads ---------------------------------------------------------------------------

    def _run_stream(self, source: _Source, state: _StreamThread) -> None:
        stream = state.stream
        audit_topic = self.config["audit.topic"]
        while not self._stopping.is_set():
            state.turns += 1
            state.tracked = False
            try:
                topic, partition, records = take_batch(stream)
            except ConsumerTimeout:
                continue
            except StopIteration:
                return
            except (KafkaClientError, KafkaProtocolError) as exc:
                self.fail(MirrorError(f"source {source.name}: reading stopped: {exc}"))
                return
            if not records:
                state.tracked = True
                continue
            try:
                if source.txn is None:
                    self._mirror(source, state, topic, partition, records, audit_topic)
                else:
                    self._mirror_in_transaction(source, state, topic, partition, records, audit_topic)
            except MirrorError as exc:
                self.fail(exc)
                return
            except MirrorTopicError as exc:
                self.fail(MirrorError(str(exc)))
                return
            except _Stopped:
                return
            except (KafkaClientError, KafkaProtocolError) as exc:
                if not self._stopping.is_set():
                    self.fail(MirrorError(f"source {source.name}: cannot send {topic}-{partition} offsets "
                                          f"{records[0].offset}..{records[-1].offset}: {exc}"))
                return

    def _mirror_in_transaction(self, source: _Source, state: _StreamThread, topic: str, partition: int,
                               records: list[ConsumerRecord], audit_topic: str) -> None:
        """exactly.once: the records join the open transaction of their source, unless their partition was released
        meanwhile (its next owner copies them); those quarantined in a transaction aborted before are skipped."""
        txn = source.txn
        with txn.lock:
            if (topic, partition) not in txn.owned or self._stopping.is_set():
                state.tracked = True
                return
            if self._quarantined:
                run: list[ConsumerRecord] = []
                for record in records:
                    reason = self._quarantined.get((source.name, topic, partition, record.offset))
                    if reason is None:
                        run.append(record)
                        continue
                    if run:
                        self._mirror(source, state, topic, partition, run, audit_topic)
                        txn.sent += len(run)
                        run = []
                    self._skip_quarantined(source, state, topic, partition, record, audit_topic, reason)
                records = run
                if not records:
                    return
            self._mirror(source, state, topic, partition, records, audit_topic)
            txn.sent += len(records)

    def _skip_quarantined(self, source: _Source, state: _StreamThread, topic: str, partition: int, record: ConsumerRecord,
                          audit_topic: str, reason: str) -> None:
        """A record quarantined when an earlier (aborted) transaction sent it: counted as quarantined again, in
        this transaction, and acknowledged unsent."""
        where = source.partition(topic, partition).where
        self.tracker.track(where, record.offset, allow_gap=True)
        state.tracked = True
        if self._audit is not None and topic != audit_topic:
            found = event_key(record.value) if record.value else None
            size = (0 if record.key is None else len(record.key)) + (0 if record.value is None else len(record.value))
            self._audit.sent(source.name, topic, [record.timestamp])
            self._audit.quarantined(source.name, topic, record.timestamp, size, reason,
                                    None if found is None else found.event_id)
        self.tracker.acknowledged(where, [record.offset])

    def _track(self, source: _Source, where: SourcePartition, records: list[ConsumerRecord]) -> None:
        """Track the records handed out (one step for a run of consecutive offsets in turn); a gap before one
        of them stops the mirror (LostOffsetsError) or, skip.lost.offsets, is skipped; a rewind stops it."""
        first, count = records[0].offset, len(records)
        if records[-1].offset - first == count - 1 and self.tracker.track_run(where, first, count):
            return
        for record in records:
            outcome = self.tracker.track(where, record.offset, allow_gap=self.skip_lost)
            if type(outcome) is Rewind:
                raise MirrorError(f"source {source.name}: {where.topic}-{where.partition} went back from offset "
                                  f"{outcome.expected} to {outcome.offset} (was the topic deleted and created "
                                  f"again?); to mirror it from its start, delete {source.offsets_at}")
            if type(outcome) is Gap:
                if not self.skip_lost:
                    raise LostOffsetsError(outcome)
                self._skipped(outcome)

    def _mirror(self, source: _Source, state: _StreamThread, topic: str, partition: int, records: list[ConsumerRecord],
                audit_topic: str) -> None:
        """Hand the records of one source partition (in offset order) to the target: tracked, counted as sent
        to the audit, then given to the producer with this hop's lineage headers, all in one step each."""
        shared = source.partition(topic, partition)
        where = shared.where
        self._track(source, where, records)
        state.tracked = True
        producer = source.producer
        assert producer is not None
        if self._drop:
            records = [r for r in records if not self._dropped(where, r)]
            if not records:
                return
        self._ensure_topic(topic, partition)
        pending = _pending(where, records)
        if self._audit is not None and topic != audit_topic:
            self._audit.sent(source.name, topic, [r.timestamp for r in records])
        refused = hand_off(producer, topic, partition, pending, shared.stamp, transactional=source.txn is not None)
        if refused:
            # Larger than any request the target topic takes: refused before they were sent.
            for message, exc in refused:
                self._quarantine([message], exc)
            if source.txn is not None and self.quarantine is not None:
                # A refused send makes the transaction abortable: restart from the target's offsets, skipping it.
                message = refused[0][0]
                raise MirrorError(f"source {source.name}: {topic}-{partition}@{message.offset} is larger than the "
                                  f"target takes (quarantined); its transaction is aborted and the mirror restarts "
                                  f"from the offsets committed in the target") from None

    def _dropped(self, where: SourcePartition, record: ConsumerRecord) -> bool:
        """Fault injection (testing.drop.event.ids): lose the record if its event is one to drop."""
        found = event_key(record.value) if record.value else None
        if found is None or found.event_id not in self._drop:
            return False
        log.warning("fault injection: event %s (%s-%d@%d) dropped", found.event_id, where.topic, where.partition,
                    record.offset)
        self.tracker.acknowledged(where, [record.offset])
        return True

    def _ensure_topic(self, topic: str, partition: int) -> None:
        """The target topic made ready for ``partition``, waiting out a target that is down."""
        assert self._topics is not None
        warned = False
        while True:
            try:
                self._topics.ensure(topic, partition)
                if topic not in self._sized_topics:
                    limit = self._topics.max_message_bytes(topic)
                    if limit is not None:
                        for producer in self._producers():
                            producer.size_for_topic(topic, limit)
                    self._sized_topics.add(topic)
                return
            except (KafkaClientError, KafkaProtocolError) as exc:
                if not exc.retriable:
                    raise
                if not warned:
                    log.warning("target topic %s cannot be checked now (retrying): %s", topic, exc)
                    warned = True
                self.metrics.errors.labels("TargetUnavailable").inc()
            if self._stopping.wait(1.0):
                raise _Stopped()

    def _skipped(self, gap: Gap) -> None:
        where = gap.where
        self.gaps.append(gap)
        self.metrics.lost.labels(where.source, where.topic, str(where.partition)).inc(gap.lost)
        log.warning("source %s: %s-%d offsets %d..%d (%d records) were deleted by the source's retention before "
                    "they were mirrored; skipped (skip.lost.offsets=true)", where.source, where.topic,
                    where.partition, gap.start, gap.end - 1, gap.lost)

    # -- acknowledgements (the producer's sender thread) ------------------------------------------------

    def after_send(self, batch: ProducerBatch, result: Any) -> None:
        """Track the target's acknowledgement of a batch; records it refused for good are quarantined; any other
        failure stops the mirror (it is not retriable)."""
        messages: list[_Pending] = batch.messages
        if self.exactly_once and batch.topic == self.config["audit.topic"]:
            # The audit counts produced in a transaction are not records of a source.
            messages = [m for m in messages if type(m) is _Pending]
            if not messages:
                if isinstance(result, BaseException) and not self._stopping.is_set():
                    self.fail(MirrorError(f"the target refused the audit counts of a transaction: {result}"))
                return
        if isinstance(result, BaseException):
            first = messages[0]
            if is_record_refusal(result) or isinstance(result, MessageSizeTooLargeError):
                self._quarantine(messages, result)
                if self.exactly_once:
                    # The transaction that sent them cannot commit: abort it and start again from the target's
                    # offsets, these records now skipped as quarantined (_load_quarantined).
                    self.fail(MirrorError(
                        f"the target refused {len(messages)} records for good (quarantined); the transaction is "
                        f"aborted and the mirror restarts from the offsets committed in the target"))
                return
            self._settle_audit(messages, False)
            if self._stopping.is_set() and isinstance(result, TimeoutError):
                # Still queued when the shutdown's time ran out: not committed, mirrored again after a restart.
                log.warning("%d records of source %s %s-%d left unsent at shutdown", len(messages),
                            first.where.source, first.where.topic, first.where.partition)
                return
            offsets = sorted(m.offset for m in messages if m.where == first.where)
            self.fail(MirrorError(
                f"the target refused {len(messages)} records for good (source {first.where.source} "
                f"{first.where.topic}-{first.where.partition} offsets {offsets[0]}..{offsets[-1]}"
                f"{' and others' if len(offsets) < len(messages) else ''}): {result}"))
            return
        metrics = self.metrics
        # Latency and age per batch, of its oldest record (an observation per record costs more than the rest).
        if batch.created:
            metrics.latency.observe(time.monotonic() - batch.created)
        oldest = min(map(_TIMESTAMP, messages))
        if oldest >= 0:
            metrics.age.observe(max(0.0, (time.time() * 1000 - oldest) / 1000))
        audit, audit_topic = self._audit, self.config["audit.topic"]
        # A target partition takes the same partition of every source: one batch may hold several sources.
        for where, run in _runs(messages):
            self.tracker.acknowledged(where, list(map(_OFFSET, run)))
            sizes = _sizes(run)
            metrics.records.labels(where.source, where.topic).inc(len(run))
            metrics.bytes.labels(where.source, where.topic).inc(sum(sizes))
            if audit is not None and where.topic != audit_topic:
                audit.settled(where.source, where.topic, list(map(_TIMESTAMP, run)), sizes, list(map(_VALUE, run)),
                              True)
        with self._lock:
            self.mirrored += len(messages)

    def _quarantine(self, messages: list[_Pending], error: BaseException) -> None:
        """Set aside records the target refused for good: written durably with their lineage, counted in the
        metrics and the audit, then acknowledged so that the mirror commits past them and goes on."""
        quarantine = self.quarantine
        audit_topic = self.config["audit.topic"]
        for message in messages:
            where = message.where
            if quarantine is None:
                self.fail(MirrorError(f"the target refused source {where.source} {where.topic}-{where.partition}@"
                                      f"{message.offset} for good ({error}) and without state.dir it cannot be "
                                      f"quarantined: give state.dir (--state-dir)"))
                return
            found = event_key(message.value) if message.value else None
            event_id = None if found is None else found.event_id
            try:
                reason = quarantine.add(source=where.source, topic=where.topic, partition=where.partition,
                                        offset=message.offset, timestamp=message.timestamp, key=message.key,
                                        value=message.value, headers=message.headers, error=error,
                                        event_id=event_id)
            except OSError as exc:
                self.fail(MirrorError(f"cannot quarantine source {where.source} {where.topic}-{where.partition}@"
                                      f"{message.offset} in {quarantine.directory}: {exc}"))
                return
            self.metrics.quarantined.labels(where.source, where.topic, reason).inc()
            if self._audit is not None and where.topic != audit_topic:
                self._audit.quarantined(where.source, where.topic, message.timestamp, message.size, reason, event_id)
            log.warning("quarantined source %s %s-%d@%d (%s%s): %s; in %s", where.source, where.topic,
                        where.partition, message.offset, reason, f", event {event_id}" if event_id else "", error,
                        quarantine.path(where.source))
            self.tracker.acknowledged(where, [message.offset])

    # -- commits and releases ------------------------------------------------------------------------

    def commit(self, sources: list[_Source] | None = None) -> None:
        """Commit, per source partition, the lowest offset the target has not acknowledged -- once the audit
        counts of every record acknowledged so far are published (a committed record is always counted)."""
        sources = sources if sources is not None else self._sources
        if self.exactly_once:
            for source in sources:
                self._commit_transaction(source)
            self.metrics.in_flight.set(self.tracker.outstanding())
            return
        offsets = {source.name: self.tracker.committable(source.name) for source in sources}
        if self._counts_published():
            for source in sources:
                written = source.connector.commit_offsets(
                    {(w.topic, w.partition): o for w, o in offsets[source.name].items()})
                if written:
                    self.metrics.commits.labels(source.name).inc(len(written))
        self.metrics.in_flight.set(self.tracker.outstanding())

    def _commit_transaction(self, source: _Source, released: list[SourcePartition] | None = None) -> None:
        """exactly.once: commit ``source``'s open transaction with the offsets after what the target acknowledged
        and the audit counts of those records (``released``: its partitions about to be let go, or None); then copy
        the offsets committed to the source's ZooKeeper (or file), where only a switch back to at-least-once
        reads them. A commit that fails aborts the transaction and stops the mirror (its restart reads on from the
        target's offsets)."""
        txn = source.txn
        with txn.lock:
            if self._failure is not None:
                return
            if not txn.producer.flush(self.config["shutdown.timeout.s"]):
                log.warning("source %s: records still unacknowledged; the transaction commits at the next interval",
                            source.name)
                return
            if self._failure is not None:
                return
            owned = txn.owned
            offsets = {(w.topic, w.partition): o for w, o in self.tracker.committable(source.name).items()
                       if (w.topic, w.partition) in owned}
            audit = self._audit.take_encoded(source.name) if self._audit is not None else []
            gone = [(w.topic, w.partition) for w in released] if released is not None else []
            commits = txn.commits
            try:
                written = txn.commit(offsets, audit, self.config["audit.topic"], gone)
            except FENCED_ERRORS as exc:
                self.fail(MirrorError(f"source {source.name}: transactional id {txn.transactional_id} was fenced "
                                      f"by a newer mirror process: {exc}"))
                return
            except COMMIT_ERRORS as exc:
                txn.abort()
                self.metrics.transactions.labels(source.name, "aborted").inc()
                self.fail(MirrorError(f"source {source.name}: transaction aborted ({exc}); the mirror restarts from "
                                      f"the offsets committed in the target"))
                return
        if txn.commits != commits:
            self.metrics.transactions.labels(source.name, "committed").inc()
        if written:
            self.metrics.commits.labels(source.name).inc(len(written))
            try:
                source.connector.commit_offsets(written)
            except _COMMIT_ERRORS as exc:
                log.debug("source %s: offsets not copied to the source now: %r", source.name, exc)

    def _counts_published(self) -> bool:
        """Publish the audit counts of what was acknowledged so far and wait for them; False (nothing may be
        committed now: the records are mirrored again after a restart, and counted again) when they could not
        be published in time."""
        if self._audit is None:
            return True
        if self._audit.publish_counted(_AUDIT_PUBLISH_TIMEOUT_S):
            return True
        self.metrics.errors.labels("AuditPublishTimeout").inc()
        log.warning("the audit counts could not be published within %.0f s; offsets are committed once they are",
                    _AUDIT_PUBLISH_TIMEOUT_S)
        return False

    def release(self, source: _Source, partitions: list[SourcePartition]) -> None:
        """Before a rebalance releases ``partitions``: let the threads finish their record, flush, commit."""
        if source.txn is not None:
            # The transaction's lock is the barrier: no stream thread is between taking a record and sending it.
            self._commit_transaction(source, partitions)
            source.txn.release([(w.topic, w.partition) for w in partitions])
            self._forget(partitions)
            return
        deadline = time.monotonic() + _BARRIER_TIMEOUT_S
        for state in source.threads:
            turns = state.turns
            while (state.thread is not None and state.thread.is_alive() and state.turns == turns
                   and not state.tracked and time.monotonic() < deadline):
                time.sleep(0.005)
        # At shutdown the producer was flushed already (as far as it could be).
        if self._producer is not None and not self._stopping.is_set():
            if not self._producer.flush(self.config["shutdown.timeout.s"]):
                log.warning("source %s: records still unacknowledged at a release; they are mirrored again by the "
                            "partitions' next owner", source.name)
        offsets = self.tracker.committable(only=partitions)
        if self._counts_published():
            written = source.connector.commit_offsets({(w.topic, w.partition): o for w, o in offsets.items()})
            if written:
                self.metrics.commits.labels(source.name).inc(len(written))
        self._forget(partitions)

    def _forget(self, partitions: list[SourcePartition]) -> None:
        for where in partitions:
            self.tracker.forget(where)
            labels = (where.source, where.topic, str(where.partition))
            if labels in self._lag_labels:
                self._lag_labels.discard(labels)
                self.metrics.lag.remove(*labels)

    def _update_lag(self) -> None:
        for source in self._sources:
            offsets = self.tracker.committable(source.name)
            by_topic: dict[str, dict[int, int]] = {}
            for where, offset in offsets.items():
                by_topic.setdefault(where.topic, {})[where.partition] = offset
            for topic, partitions in by_topic.items():
                try:
                    latest = source.admin.list_offsets(topic, list(partitions))
                except (KafkaClientError, KafkaProtocolError) as exc:
                    log.debug("lag of %s %s not known now: %s", source.name, topic, exc)
                    continue
                for partition, committed in partitions.items():
                    end = latest.get(partition)
                    if end is not None:
                        labels = (source.name, topic, str(partition))
                        self._lag_labels.add(labels)
                        self.metrics.lag.labels(*labels).set(max(0, end - committed))

    # -- shutdown ---------------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._stopping.set()
        timeout_s = self.config["shutdown.timeout.s"]
        deadline = time.monotonic() + timeout_s
        for source in self._sources:
            for state in source.threads:
                if state.thread is not None:
                    state.thread.join(max(0.0, deadline - time.monotonic()))
        producer = self._producer
        if producer is not None and self._failure is None and not producer.flush(
                max(0.0, deadline - time.monotonic())):
            log.warning("%d records still unacknowledged after %.0f s; they are mirrored again after a restart",
                        self.tracker.outstanding(), timeout_s)
        for source in self._sources:
            try:
                if source.txn is not None:
                    self._final_transaction(source)
                else:
                    self.commit([source])
            except _COMMIT_ERRORS as exc:
                log.warning("source %s: final commit failed (the records after the last commit are mirrored "
                            "again): %r", source.name, exc)
            source.connector.shutdown()
            source.admin.close()
            if source.txn is not None:
                source.txn.close_admin()
        for each in ([producer] if producer is not None else [s.producer for s in self._sources if s.producer]):
            try:
                each.close(max(5.0, deadline - time.monotonic()))
            except TimeoutError as exc:
                log.warning("%s", exc)
        self._stop_audit(timeout_s)
        if self._target_cluster is not None:
            self._target_cluster.close()
        if self._target_discovery is not None:
            self._target_discovery.close()
        log.info("mirror stopped: %d records mirrored%s", self.mirrored,
                 f", {sum(g.lost for g in self.gaps)} lost offsets skipped" if self.gaps else "")

    def _final_transaction(self, source: _Source) -> None:
        """At shutdown (exactly.once): commit what was acknowledged, its partitions marked released, or abort."""
        txn = source.txn
        if self._failure is None:
            self._commit_transaction(source, [SourcePartition(source.name, t, p) for t, p in sorted(txn.owned)])
        if self._failure is not None:
            txn.abort()

    # -- audit -------------------------------------------------------------------------------------------

    def _start_audit(self) -> None:
        config = self.config
        if not config["audit.enable"]:
            return
        producer = config.producer_config()
        where = {k: producer[k] for k in ("metadata.broker.list", "zookeeper.connect") if producer[k]}
        self._audit = MirrorAudit(config.sources, window_ms=config["audit.window.ms"],
                                  producer_config={**where, "client.id": "mirror-audit", "request.required.acks": -1,
                                                   **security_settings(producer)},
                                  registry_url=config["schema.registry.url"], topic=config["audit.topic"],
                                  metrics=self.metrics,
                                  registry_settings=RegistryClientSettings.from_config(config),
                                  transactional=self.exactly_once).start()

    def _settle_audit(self, messages: list[_Pending], acknowledged: bool) -> None:
        audit = self._audit
        if audit is not None:
            audit_topic = self.config["audit.topic"]
            for where, run in _runs(messages):
                if where.topic != audit_topic:
                    audit.settled(where.source, where.topic, list(map(_TIMESTAMP, run)), _sizes(run),
                                  list(map(_VALUE, run)), acknowledged)

    def _stop_audit(self, timeout_s: float) -> None:
        if self._audit is not None:
            left = self._audit.close(timeout_s)
            if left:
                log.error("%d audit counts could not be published before shutdown", left)
