"""ReplicaFetcherManager and ReplicaFetcherThread: followers copy their leaders' logs (Kafka's replica fetchers).

One thread per source broker (times num.replica.fetchers, partitions spread by hash) keeps a connection
to that leader and loops: partitions that just became followers first find where their log diverges
from the leader's (KIP-101/KIP-279: OffsetForLeaderEpoch with the follower's latest epoch, truncation
to the end of the largest common epoch, repeated while the follower holds epochs the leader does not
know), then Fetch requests carrying this broker's id copy the batches as the leader wrote them
(Log.append_as_follower) and bring the leader's high watermark and log start offset along.

The threads do blocking network I/O and disk appends, never on the event loop. A partition's processing
runs under the thread's lock, which ``remove_partitions`` takes too: once it returns, the thread
touches that log no more (so the loop can make it a leader or delete it).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterable

from broker.log.errors import CorruptRecordError, InvalidRecordError, KafkaStorageError
from broker.log.log import Log
from broker.metadata import BrokerEndpoint
from pipeline.client.connection import BrokerConnection
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity
from pipeline.client.errors import KafkaClientError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import ProtocolError
from pipeline.protocol.errors import ErrorCode
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
UNDEFINED_EPOCH = -1

# Answers after which a partition waits for the metadata to change (or for replica.fetch.backoff.ms).
_RETRY_LATER = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                          ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE,
                          ErrorCode.LEADER_NOT_AVAILABLE})
_APPEND_ERRORS = (OSError, CorruptRecordError, InvalidRecordError, KafkaStorageError, ValueError)


@dataclass(frozen=True)
class FetcherSettings:
    """The replica.* broker properties a fetcher uses."""

    broker_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    partition_max_bytes: int = 1 << 20
    response_max_bytes: int = 10 << 20
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    fetchers_per_broker: int = 1
    # How to connect to the leader's inter-broker listener (KafkaConfig.inter_broker_security()).
    security: ClientSecurity = PLAINTEXT_SECURITY


class PartitionFetchState:
    """One partition a fetcher copies: its log, the leader epoch it follows, whether it must truncate first."""

    __slots__ = ("key", "log", "leader_epoch", "truncating", "delayed_until", "leader_high_watermark")

    def __init__(self, key: TopicPartition, log: Log, leader_epoch: int) -> None:
        self.key = key
        self.log = log
        self.leader_epoch = leader_epoch
        self.truncating = True
        self.delayed_until = 0.0
        self.leader_high_watermark = -1

    @property
    def lag(self) -> int:
        """Messages the leader had (by its last high watermark) that this replica has not."""
        return max(0, self.leader_high_watermark - self.log.log_end_offset)


class ReplicaFetcherThread(threading.Thread):
    """Copies the partitions this broker follows from one leader."""

    def __init__(self, name: str, leader: BrokerEndpoint, settings: FetcherSettings) -> None:
        super().__init__(name=name, daemon=True)
        self.leader = leader
        self.settings = settings
        self._partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._connection: BrokerConnection | None = None
        self._last_error = ""

    # -- called from the event loop --------------------------------------------------------------

    def add(self, states: Iterable[PartitionFetchState]) -> None:
        with self._lock:
            for state in states:
                self._partitions[state.key] = state
        self._wake.set()

    def remove(self, keys: Iterable[TopicPartition]) -> None:
        """Stop copying these partitions; returns once no append to them is in progress."""
        with self._lock:
            for key in keys:
                self._partitions.pop(key, None)

    def partition_count(self) -> int:
        return len(self._partitions)

    def states(self) -> list[PartitionFetchState]:
        return list(self._partitions.values())

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    # -- the thread ------------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stopped:
            now = time.monotonic()
            with self._lock:
                active = [s for s in self._partitions.values() if s.delayed_until <= now]
                waits = [s.delayed_until - now for s in self._partitions.values() if s.delayed_until > now]
            if not active:
                self._wake.wait(min(waits, default=1.0))
                self._wake.clear()
                continue
            try:
                connection = self._connect()
                truncating = [s for s in active if s.truncating]
                if truncating:
                    self._truncate(connection, truncating)
                else:
                    self._fetch(connection, active)
                self._last_error = ""
            except (KafkaClientError, ProtocolError, OSError) as exc:
                self._disconnect()
                message = str(exc) or type(exc).__name__
                if message != self._last_error:
                    log.warning("fetching from broker %d at %s:%d failed: %s", self.leader.broker_id, self.leader.host,
                                self.leader.port, message)
                    self._last_error = message
                self._wake.wait(self.settings.backoff_ms / 1000)
                self._wake.clear()
        self._disconnect()

    def _connect(self) -> BrokerConnection:
        if self._connection is None:
            settings = self.settings
            self._connection = BrokerConnection(
                self.leader.host, self.leader.port, client_id=f"broker-{settings.broker_id}-fetcher",
                timeout_s=(settings.socket_timeout_ms + settings.max_wait_ms) / 1000, node_id=self.leader.broker_id,
                security=settings.security)
        self._connection.connect()
        return self._connection

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _current(self, state: PartitionFetchState) -> bool:
        """Whether ``state`` is still the one copied (call with the lock held)."""
        return self._partitions.get(state.key) is state

    def _delay(self, state: PartitionFetchState, why: str) -> None:
        log.info("%s-%d: %s; retrying in %d ms", *state.key, why, self.settings.backoff_ms)
        state.delayed_until = time.monotonic() + self.settings.backoff_ms / 1000

    # -- truncation ------------------------------------------------------------------------------

    def _truncate(self, connection: BrokerConnection, states: list[PartitionFetchState]) -> None:
        asking = []
        with self._lock:
            for state in states:
                if not self._current(state):
                    continue
                latest = state.log.leader_epoch_cache.latest_epoch
                if latest == UNDEFINED_EPOCH:
                    # Nothing written under an epoch: only what is known committed is kept.
                    self._truncate_to(state, state.log.high_watermark, "no leader epoch in the log")
                    state.truncating = False
                else:
                    asking.append((state, latest))
        if not asking:
            return
        by_topic: dict[str, list[dict]] = {}
        for state, latest in asking:
            by_topic.setdefault(state.key[0], []).append(
                {"partition": state.key[1], "current_leader_epoch": state.leader_epoch, "leader_epoch": latest})
        response = connection.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": self.settings.broker_id,
            "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()]})
        answers = {(t["topic"], p["partition"]): p for t in response["topics"] for p in t["partitions"]}
        with self._lock:
            for state, latest in asking:
                answer = answers.get(state.key)
                if not self._current(state) or answer is None:
                    continue
                if answer["error_code"]:
                    self._delay(state, f"OffsetForLeaderEpoch answered {ErrorCode(answer['error_code']).name}")
                    continue
                self._apply_epoch_end(state, latest, answer["leader_epoch"], answer["end_offset"])

    def _apply_epoch_end(self, state: PartitionFetchState, asked: int, leader_epoch: int, leader_end: int) -> None:
        """Truncate to where the leader's log and ours diverge; another round when we hold epochs it lacks."""
        log_ = state.log
        if leader_epoch == UNDEFINED_EPOCH or leader_end < 0:
            self._truncate_to(state, log_.high_watermark, f"the leader knows no epoch up to {asked}")
            state.truncating = False
            return
        own_epoch, own_end = log_.end_offset_for_epoch(leader_epoch)
        if own_epoch == leader_epoch:
            self._truncate_to(state, min(leader_end, own_end), f"epoch {leader_epoch} ends at {leader_end} on the leader")
            state.truncating = False
        elif own_epoch == UNDEFINED_EPOCH:
            self._truncate_to(state, log_.high_watermark, f"no epoch up to {leader_epoch} in this log")
            state.truncating = False
        else:
            # Our epochs above own_epoch are unknown to the leader: drop them, then ask again for own_epoch.
            self._truncate_to(state, min(leader_end, own_end), f"epochs after {own_epoch} are not on the leader")

    def _truncate_to(self, state: PartitionFetchState, offset: int, why: str) -> None:
        log_ = state.log
        if offset < log_.log_end_offset:
            log.info("%s-%d: truncating from %d to %d (%s)", *state.key, log_.log_end_offset, offset, why)
            log_.truncate_to(offset)

    # -- fetching --------------------------------------------------------------------------------

    def _fetch(self, connection: BrokerConnection, states: list[PartitionFetchState]) -> None:
        settings = self.settings
        by_topic: dict[str, list[dict]] = {}
        sent: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for state in states:
            offset = state.log.log_end_offset
            sent[state.key] = (state, offset)
            by_topic.setdefault(state.key[0], []).append({
                "partition": state.key[1], "current_leader_epoch": state.leader_epoch, "fetch_offset": offset,
                "log_start_offset": state.log.log_start_offset, "partition_max_bytes": settings.partition_max_bytes})
        response = connection.request(ApiKey.FETCH, {
            "replica_id": settings.broker_id, "max_wait_ms": settings.max_wait_ms, "min_bytes": settings.min_bytes,
            "max_bytes": settings.response_max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()], "forgotten_topics_data": [],
            "rack_id": ""})
        if response.get("error_code"):
            raise KafkaClientError(f"Fetch answered {ErrorCode(response['error_code']).name}")
        for topic in response["responses"]:
            for part in topic["partitions"]:
                found = sent.get((topic["topic"], part["partition_index"]))
                if found is None:
                    continue
                state, offset = found
                with self._lock:
                    if self._current(state) and state.log.log_end_offset == offset and not state.truncating:
                        self._process(state, part)

    def _process(self, state: PartitionFetchState, part: dict) -> None:
        code = part["error_code"]
        log_ = state.log
        if code == ErrorCode.NONE:
            records = part["records"]
            if records:
                try:
                    log_.append_as_follower(records)
                except _APPEND_ERRORS as exc:
                    log.error("%s-%d: appending the leader's batches at %d failed: %s", *state.key,
                              log_.log_end_offset, exc)
                    self._delay(state, "the append failed")
                    return
            state.leader_high_watermark = part["high_watermark"]
            log_.update_high_watermark(min(part["high_watermark"], log_.log_end_offset))
            leader_start = part["log_start_offset"]
            if leader_start > log_.log_start_offset:
                log_.maybe_increment_log_start_offset(leader_start)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = part["log_start_offset"]
            if leader_start > log_.log_end_offset:
                log.info("%s-%d: the leader's log starts at %d, past ours (%d): starting over there", *state.key,
                         leader_start, log_.log_end_offset)
                log_.truncate_fully_and_start_at(leader_start)
            else:
                state.truncating = True
        elif code in _RETRY_LATER:
            self._delay(state, f"the leader answered {ErrorCode(code).name}")
        else:
            self._delay(state, f"the leader answered error {code}")


class ReplicaFetcherManager:
    """The fetcher threads of this broker, one per (leader, fetcher index), created and retired as needed."""

    def __init__(self, settings: FetcherSettings) -> None:
        self.settings = settings
        self._threads: dict[tuple[BrokerEndpoint, int], ReplicaFetcherThread] = {}
        self._fetching: dict[TopicPartition, ReplicaFetcherThread] = {}

    def fetching_from(self, key: TopicPartition) -> BrokerEndpoint | None:
        thread = self._fetching.get(key)
        return None if thread is None else thread.leader

    def add_partitions(self, leader: BrokerEndpoint, states: list[PartitionFetchState]) -> None:
        """Copy these partitions from ``leader`` (each one truncates first)."""
        self.remove_partitions([s.key for s in states])
        groups: dict[int, list[PartitionFetchState]] = {}
        for state in states:
            groups.setdefault(hash(state.key) % self.settings.fetchers_per_broker, []).append(state)
        for index, group in groups.items():
            thread = self._threads.get((leader, index))
            if thread is None:
                thread = ReplicaFetcherThread(f"replica-fetcher-{index}-broker-{leader.broker_id}", leader, self.settings)
                self._threads[(leader, index)] = thread
                thread.start()
            thread.add(group)
            for state in group:
                self._fetching[state.key] = thread

    def remove_partitions(self, keys: Iterable[TopicPartition]) -> None:
        by_thread: dict[ReplicaFetcherThread, list[TopicPartition]] = {}
        for key in keys:
            thread = self._fetching.pop(key, None)
            if thread is not None:
                by_thread.setdefault(thread, []).append(key)
        for thread, removed in by_thread.items():
            thread.remove(removed)
        self._retire_idle()

    def _retire_idle(self) -> None:
        for key, thread in list(self._threads.items()):
            if thread.partition_count() == 0:
                del self._threads[key]
                thread.stop()

    def max_lag(self) -> int:
        """The largest lag of a followed partition behind its leader's high watermark (any thread)."""
        return max((s.lag for t in list(self._threads.values()) for s in t.states()), default=0)

    def shutdown(self) -> None:
        threads = list(self._threads.values())
        self._threads.clear()
        self._fetching.clear()
        for thread in threads:
            thread.stop()
        for thread in threads:
            thread.join(10)
