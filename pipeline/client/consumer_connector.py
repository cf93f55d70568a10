"""ConsumerConnector: the paper's high-level consumer -- consumer groups coordinated through ZooKeeper.

    connector = ConsumerConnector({"zookeeper.connect": "zk:2181/dc1", "group.id": "etl"})
    streams = connector.create_message_streams({"clicks": 2})      # {"clicks": [stream, stream]}
    for message in streams["clicks"][0]:                            # blocks; ConsumerRecord items
        ...
    connector.shutdown()

Each consumer registers itself (ephemeral) under /consumers/<group>/ids/<consumer id> with its
subscription, and watches the group's members, the brokers, the subscribed topics (and, for a topic
filter, the list of topics). Every change runs the paper's Algorithm 1 (:mod:`pipeline.client.rebalance`):
stop handing out the partitions it owns, commit their consumed offsets, release their ownership, compute
the contiguous range of partitions of each of its streams, claim each one by creating the ephemeral
/consumers/<group>/owners/<topic>/<partition> (holding the stream id), and resume each from
/consumers/<group>/offsets/<topic>/<partition> or per auto.offset.reset. While a previous owner has not
let go (NodeExists), the whole rebalance is retried after rebalance.backoff.ms. A rebalance that finds
the same assignment still owned changes nothing (a broker coming or going only pauses or resumes fetching).

Offsets: ``commit_offsets()``, every auto.commit.interval.ms when auto.commit.enable, every rebalance and
``shutdown()`` write, per partition, the offset after the last record the application is done with: a
record counts as consumed once the application asks its stream for the next record (or calls the
stream's ``acknowledge()``), never merely because it was handed out. A consumer that dies while
processing a record therefore leaves that record to the next owner: delivery is at least once.

ZooKeeper slow or gone: every request waits at most zookeeper.connection.timeout.ms. When kazoo reports
the connection SUSPENDED or the session LOST, the consumer stops handing out records at once -- its
ownerships may be gone, and another member may already read those partitions -- and resumes only after
a rebalance on a live connection (registering again if the session expired) has claimed them again.
``shutdown()`` finishes within its bounds even without ZooKeeper; what it could not commit is read again
by the partitions' next owner from the last commit, so nothing is lost.

An application that finishes records out of order (a mirror waiting for another cluster's acknowledgements)
creates the connector with ``acknowledge_on_next=False`` and says itself what is done:
``commit_offsets({(topic, partition): offset})`` sets and writes the offsets of the partitions it owns, and
every other commit (automatic, on a rebalance, on shutdown) writes only what it said. A
:class:`ConsumerRebalanceListener` (Kafka 0.8.2's) hears of the partitions claimed, with their committed
offsets, before their fetching starts, and of the partitions about to be released -- no longer handed out,
still owned -- so that it can commit what it finished first.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from typing import Any, Mapping

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from pipeline.client.cluster import Cluster
from pipeline.client.consumer_config import ConsumerConnectorConfig
from pipeline.client.consumer_fetcher import ConsumerFetcher
from pipeline.client.consumer_stream import ConsumerTimeout, KafkaStream, PartitionTopicInfo
from pipeline.client.errors import KafkaClientError, KafkaConnectionError
from pipeline.client.rebalance import StreamId, TopicPartition, consumer_assignment, streams_of
from pipeline.client.topic_filter import TopicFilter, topic_filter_from_registration
from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
from pipeline.zk import layout
from pipeline.zk.client import BoundedZooKeeper, connect

__all__ = ["ConsumerConnector", "ConsumerRebalanceListener", "ConsumerTimeout", "KafkaStream"]

log = logging.getLogger(__name__)

STATIC = "static"


class ConsumerRebalanceListener:
    """Hooks around a rebalance (Kafka's ConsumerRebalanceListener); both run on the rebalancing thread."""

    def before_releasing_partitions(self, partitions: list[TopicPartition]) -> None:
        """``partitions`` are no longer handed out and are about to be committed and released."""

    def before_starting_fetchers(self, partitions: dict[TopicPartition, int | None]) -> Mapping[TopicPartition, int] | None:
        """``partitions`` are now ours, each with its committed offset (None: none, auto.offset.reset applies);
        nothing of them has been handed out yet. What it returns, if anything, are the offsets to start those
        partitions at instead (a listener that keeps its offsets elsewhere, as the exactly-once mirror does)."""
        return None


def start_offsets(listener: ConsumerRebalanceListener | None,
                  infos: dict[TopicPartition, PartitionTopicInfo]) -> dict[TopicPartition, PartitionTopicInfo]:
    """``infos`` once ``listener`` heard of them, each starting where the listener says if it says so."""
    if listener is None:
        return infos
    starts = listener.before_starting_fetchers({tp: info.committed_offset for tp, info in infos.items()})
    if not starts:
        return infos
    return {tp: PartitionTopicInfo(info.topic, info.partition, info.queue, starts[tp], info.fetch_size)
            if starts.get(tp) is not None else info for tp, info in infos.items()}


class ConsumerConnector:
    """One member of a consumer group: registration, rebalancing, fetching into streams, offset commits.

    ``config``: a dict or properties file of CONSUMER_CONNECTOR_CONFIG (zookeeper.connect and group.id are
    required). Streams are created once, by ``create_message_streams`` or ``create_message_streams_by_filter``.
    ``acknowledge_on_next=False``: records are done only when ``commit_offsets(offsets)`` says so (module
    docstring); ``rebalance_listener`` hears of every rebalance.
    """

    def __init__(self, config: Mapping[str, Any] | ConsumerConnectorConfig | str, *,
                 acknowledge_on_next: bool = True,
                 rebalance_listener: ConsumerRebalanceListener | None = None) -> None:
        self.config = config if isinstance(config, ConsumerConnectorConfig) else ConsumerConnectorConfig(config)
        cfg = self.config
        self.group: str = cfg["group.id"]
        self.consumer_id: str = cfg["consumer.id"] or (
            f"{self.group}_{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}")
        #: The kazoo client rooted at the cluster's chroot (tests expire its session).
        zk_timeout_s = cfg["zookeeper.connection.timeout.ms"] / 1000
        self.zookeeper = connect(cfg["zookeeper.connect"], timeout_s=zk_timeout_s,
                                 session_timeout_s=cfg["zookeeper.session.timeout.ms"] / 1000,
                                 security=cfg.zookeeper_security)
        # Every request of ours waits at most zookeeper.connection.timeout.ms.
        self._zk = BoundedZooKeeper(self.zookeeper, zk_timeout_s)
        self._discovery = ZooKeeperBrokerDiscovery(self.zookeeper, timeout_s=zk_timeout_s)
        self._cluster = Cluster(self._discovery, client_id=cfg["client.id"],
                                timeout_s=cfg["socket.timeout.ms"] / 1000,
                                metadata_max_age_s=cfg["topic.metadata.refresh.interval.ms"] / 1000,
                                security=cfg.security)
        # Guards the infos' active flags and consumed offsets between streams, fetcher and rebalancer.
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._fetcher = ConsumerFetcher(self._cluster, cfg, self._lock, name=f"fetcher-{self.consumer_id}")
        self._infos: dict[TopicPartition, PartitionTopicInfo] = {}
        self._owned: list[str] = []
        self._owner_session: int | None = None
        self._assignment: dict[TopicPartition, int] | None = None
        self._subscription: dict[str, int] = {}
        self._filter: TopicFilter | None = None
        self._topic_streams: dict[str, list[KafkaStream]] = {}
        self._filter_streams: list[KafkaStream] = []
        self._rebalance_needed = threading.Event()
        self._first_rebalance = threading.Event()
        self._closing = threading.Event()
        self._session_lost = False
        self._reregister = False
        # Bumped (under _lock) whenever the ZooKeeper connection drops: a rebalance that started before
        # must not install what it claimed.
        self._connection_epoch = 0
        self._threads: list[threading.Thread] = []
        self.closed = False
        #: Rebalances that changed what this consumer owns (for monitoring and tests).
        self.rebalance_count = 0
        self._acknowledge_on_next = acknowledge_on_next
        self._listener = rebalance_listener
        self.zookeeper.add_listener(self._on_zookeeper_state)

    # -- the paper's API ---------------------------------------------------------------------------

    def create_message_streams(self, topic_count_map: Mapping[str, int]) -> dict[str, list[KafkaStream]]:
        """``{topic: n}`` -> ``{topic: [n streams]}``; the group shares each topic's partitions among all streams."""
        if not topic_count_map:
            raise ValueError("subscribe to at least one topic")
        for topic, count in topic_count_map.items():
            if not topic or "/" in topic or int(count) < 1:
                raise ValueError(f"bad subscription {topic!r}: {count} streams")
        self._check_not_subscribed()
        self._subscription = {topic: int(count) for topic, count in topic_count_map.items()}
        self._topic_streams = {topic: [self._new_stream(f"{topic}-{i}") for i in range(count)]
                               for topic, count in self._subscription.items()}
        self._start()
        return {topic: list(streams) for topic, streams in self._topic_streams.items()}

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1) -> list[KafkaStream]:
        """``num_streams`` streams over every topic ``topic_filter`` allows, now and when topics appear later."""
        if num_streams < 1:
            raise ValueError(f"num_streams must be positive, got {num_streams}")
        self._check_not_subscribed()
        self._filter = topic_filter
        self._subscription = {topic_filter.regex: num_streams}
        self._filter_streams = [self._new_stream(f"filter-{i}") for i in range(num_streams)]
        self._start()
        return list(self._filter_streams)

    def commit_offsets(self, offsets: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Write the consumed offset of every owned partition to ZooKeeper; return those written now.

        ``offsets``: first set the consumed offset of these partitions (the next offset to read), and write
        only them; a partition this consumer does not own (any more) is left alone.
        """
        with self._lock:
            if offsets is None:
                infos = list(self._infos.values())
            else:
                infos = []
                for tp, offset in offsets.items():
                    info = self._infos.get(tp)
                    if info is not None:
                        info.consumed_offset = offset
                        infos.append(info)
        return self._commit(infos)

    def owned_partitions(self) -> dict[TopicPartition, str]:
        """The partitions this consumer owns right now, with the id of the stream reading each."""
        return {tp: str(StreamId(self.consumer_id, index)) for tp, index in (self._assignment or {}).items()}

    def shutdown(self) -> None:
        """Stop fetching, commit the consumed offsets, release ownership, leave the group, end the streams.

        Bounded when ZooKeeper is slow or gone: each request waits at most zookeeper.connection.timeout.ms
        and the first that fails ends the attempt. Nothing is lost then: offsets left uncommitted are read
        again by the partitions' next owner from the last commit, and our registration and ownerships
        vanish with our session.
        """
        if self.closed:
            return
        self.closed = True
        self._closing.set()
        self._rebalance_needed.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(30)
        self._fetcher.stop()
        with self._lock:
            infos = list(self._infos.values())
            for info in infos:
                info.active = False
        try:
            self._before_releasing(infos)
            with self._lock:
                self._infos = {}
            self._commit(infos)
            self._release_ownership()
            self._zk.delete(layout.consumer_path(self.group, self.consumer_id))
        except NoNodeError:
            pass
        except KazooException as exc:
            log.warning("consumer %s: ZooKeeper unavailable while shutting down (uncommitted offsets are read "
                        "again by the next owner): %r", self.consumer_id, exc)
        for stream in self._all_streams():
            stream.shutdown()
        self._discovery.close()
        self.zookeeper.remove_listener(self._on_zookeeper_state)
        self.zookeeper.stop()
        self.zookeeper.close()

    def __enter__(self) -> "ConsumerConnector":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- start-up ------------------------------------------------------------------------------------

    def _check_not_subscribed(self) -> None:
        if self.closed:
            raise KafkaClientError("the consumer connector is shut down")
        if self._subscription:
            raise KafkaClientError("streams were already created for this consumer connector")

    def _new_stream(self, name: str) -> KafkaStream:
        return KafkaStream(name, self._lock, self.config["queued.max.message.chunks"],
                           self.config["consumer.timeout.ms"], acknowledge_on_next=self._acknowledge_on_next)

    def _all_streams(self) -> list[KafkaStream]:
        return [s for streams in self._topic_streams.values() for s in streams] + self._filter_streams

    def _stream(self, topic: str, index: int) -> KafkaStream:
        return self._filter_streams[index] if self._filter is not None else self._topic_streams[topic][index]

    def _start(self) -> None:
        self._register()
        self._fetcher.start()
        targets = [("rebalance", self._run_rebalancer)]
        if self.config["auto.commit.enable"]:
            targets.append(("autocommit", self._run_auto_commit))
        for name, target in targets:
            thread = threading.Thread(target=target, name=f"{name}-{self.consumer_id}", daemon=True)
            self._threads.append(thread)
            thread.start()
        self._rebalance_needed.set()
        # Like Kafka's connector, return once this consumer owns its share (or give up waiting and go on).
        if not self._first_rebalance.wait(2 * self.config["zookeeper.session.timeout.ms"] / 1000):
            log.warning("consumer %s: first rebalance not done yet; it goes on in the background", self.consumer_id)

    def _register(self) -> None:
        pattern = STATIC if self._filter is None else self._filter.pattern
        data = layout.consumer_registration(self._subscription, pattern)
        path = layout.consumer_path(self.group, self.consumer_id)
        try:
            self._zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            # Left by our previous session (it vanishes only when that session expires): replace it.
            self._zk.delete(path)
            self._zk.create(path, data, ephemeral=True, makepath=True)

    # -- watches and session --------------------------------------------------------------------------

    def _on_change(self, event: object = None) -> None:
        self._rebalance_needed.set()

    def _on_zookeeper_state(self, state: str) -> None:
        # Called on kazoo's connection thread: no ZooKeeper requests here.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._suspend()
            if state == KazooState.LOST:
                self._session_lost = True
        elif state == KazooState.CONNECTED:
            if self._session_lost:
                # A new session: our ephemeral registration and ownerships are gone.
                self._session_lost = False
                self._reregister = True
            self._rebalance_needed.set()

    def _suspend(self) -> None:
        """Hand out nothing more of what we own until a rebalance has claimed it again.

        The infos stay listed, so that rebalance commits what the application finished (if the session
        survived) and releases their ownership before claiming anew.
        """
        with self._lock:
            self._connection_epoch += 1
            for info in self._infos.values():
                info.active = False
            self._assignment = None
            self._fetcher.assign([])
        for stream in self._all_streams():
            stream.clear()

    # -- rebalancing ------------------------------------------------------------------------------------

    def _run_rebalancer(self) -> None:
        backoff_s = self.config["rebalance.backoff.ms"] / 1000
        while True:
            self._rebalance_needed.wait()
            if self._closing.is_set():
                return
            self._rebalance_needed.clear()
            try:
                if self._reregister:
                    self._register()
                    self._reregister = False
                done = self._rebalance()
            except (KazooException, KafkaConnectionError) as exc:
                log.warning("consumer %s: rebalance failed, retrying: %r", self.consumer_id, exc)
                done = False
            except Exception:
                log.exception("consumer %s: rebalance failed, retrying", self.consumer_id)
                done = False
            if done:
                self._first_rebalance.set()
            else:
                self._rebalance_needed.set()
                self._closing.wait(backoff_s)

    def _rebalance(self) -> bool:
        """One attempt of Algorithm 1; False when a partition is still owned by someone else."""
        zk = self._zk
        with self._lock:
            epoch = self._connection_epoch
        members = zk.get_children(layout.consumer_ids_path(self.group), watch=self._on_change)
        if self.consumer_id not in members:
            self._register()
            members = zk.get_children(layout.consumer_ids_path(self.group), watch=self._on_change)
        zk.get_children(layout.BROKER_IDS, watch=self._on_change)
        streams_by_topic = self._group_streams(members)
        my_topics = sorted(t for t, streams in streams_by_topic.items()
                           if any(s.consumer_id == self.consumer_id for s in streams))
        partitions_by_topic = {topic: self._topic_partitions(topic) for topic in my_topics}
        wanted = consumer_assignment(self.consumer_id, partitions_by_topic,
                                     {t: streams_by_topic[t] for t in my_topics})
        if wanted == self._assignment and self._still_owned(wanted):
            return True
        self._release_all()
        if not self._claim(wanted):
            return False
        infos = {}
        for (topic, partition), index in wanted.items():
            infos[(topic, partition)] = PartitionTopicInfo(topic, partition, self._stream(topic, index).queue,
                                                           self._committed_offset(topic, partition),
                                                           self._fetcher.fetch_size)
        infos = start_offsets(self._listener, infos)
        with self._lock:
            if epoch != self._connection_epoch:
                # The connection dropped meanwhile: what we claimed may not be ours any more.
                return False
            self._infos = infos
            self._assignment = wanted
            self._fetcher.assign(infos.values())
        self.rebalance_count += 1
        log.info("consumer %s owns %s", self.consumer_id, sorted(wanted))
        return True

    def _group_streams(self, members: list[str]) -> dict[str, list[StreamId]]:
        """Every topic some member subscribes to, with all the group's streams for it."""
        registrations = {}
        for member in members:
            try:
                registrations[member] = layout.decode(
                    self._zk.get(layout.consumer_path(self.group, member))[0])
            except NoNodeError:
                continue
        all_topics: list[str] | None = None
        streams: dict[str, list[StreamId]] = {}
        for member, registration in sorted(registrations.items()):
            pattern = registration.get("pattern", STATIC)
            for name, count in registration.get("subscription", {}).items():
                if pattern == STATIC:
                    topics = [name]
                else:
                    if all_topics is None:
                        all_topics = self._all_topics()
                    topics = topic_filter_from_registration(pattern, name).select(all_topics)
                for topic in topics:
                    streams.setdefault(topic, []).extend(streams_of(member, int(count)))
        return streams

    def _all_topics(self) -> list[str]:
        try:
            return self._zk.get_children(layout.BROKER_TOPICS, watch=self._on_change)
        except NoNodeError:
            self._zk.exists(layout.BROKER_TOPICS, watch=self._on_change)
            return []

    def _topic_partitions(self, topic: str) -> list[int]:
        try:
            data = self._zk.get(layout.topic_path(topic), watch=self._on_change)[0]
        except NoNodeError:
            # Not created yet: rebalance when it is.
            if self._zk.exists(layout.topic_path(topic), watch=self._on_change) is not None:
                self._rebalance_needed.set()
            return []
        return sorted(layout.parse_topic_assignment(data))

    def _still_owned(self, assignment: dict[TopicPartition, int]) -> bool:
        for (topic, partition), index in assignment.items():
            try:
                data = self._zk.get(layout.owner_path(self.group, topic, partition))[0]
            except NoNodeError:
                return False
            if data.decode() != str(StreamId(self.consumer_id, index)):
                return False
        return True

    def _release_all(self) -> None:
        """Stop handing out what we own, commit it, and give up its ownership."""
        with self._lock:
            infos = list(self._infos.values())
            for info in infos:
                info.active = False
        self._fetcher.assign([])
        for stream in self._all_streams():
            stream.clear()
        self._assignment = None
        self._before_releasing(infos)
        with self._lock:
            self._infos = {}
        self._commit(infos)
        self._release_ownership()

    def _before_releasing(self, infos: list[PartitionTopicInfo]) -> None:
        # The infos stay listed meanwhile, so that the listener can commit_offsets() them.
        if self._listener is not None and infos:
            self._listener.before_releasing_partitions([(i.topic, i.partition) for i in infos])

    def _claim(self, assignment: dict[TopicPartition, int]) -> bool:
        zk = self._zk
        session_id = self._session_id()
        self._owner_session = session_id
        for (topic, partition), index in sorted(assignment.items()):
            path = layout.owner_path(self.group, topic, partition)
            stream_id = str(StreamId(self.consumer_id, index)).encode()
            try:
                zk.create(path, stream_id, ephemeral=True, makepath=True)
            except NodeExistsError:
                try:
                    data, stat = zk.get(path)
                except NoNodeError:
                    data, stat = b"", None
                if stat is None or data != stream_id or stat.ephemeralOwner != session_id:
                    log.info("consumer %s: %s-%d is still owned by %s; will retry", self.consumer_id, topic,
                             partition, data.decode() or "someone")
                    self._release_ownership()
                    return False
            self._owned.append(path)
        return True

    def _session_id(self) -> int | None:
        client_id = self.zookeeper.client_id
        return client_id[0] if client_id else None

    def _release_ownership(self) -> None:
        """Delete the owner nodes we created -- only while they are still ours (same session)."""
        session_id = self._session_id()
        for path in self._owned:
            try:
                _, stat = self._zk.get(path)
                if stat.ephemeralOwner == session_id:
                    self._zk.delete(path, version=stat.version)
            except NoNodeError:
                pass
        self._owned = []

    # -- offsets -----------------------------------------------------------------------------------------

    def _committed_offset(self, topic: str, partition: int) -> int | None:
        try:
            data = self._zk.get(layout.offset_path(self.group, topic, partition))[0]
        except NoNodeError:
            return None
        return layout.parse_offset(data)

    def _commit(self, infos: list[PartitionTopicInfo]) -> dict[TopicPartition, int]:
        written: dict[TopicPartition, int] = {}
        if self._session_id() != self._owner_session:
            # The session that owned these partitions expired: others may own and commit them now.
            return written
        with self._commit_lock:
            for info in infos:
                with self._lock:
                    offset = info.consumed_offset
                if offset is None or offset == info.committed_offset:
                    continue
                path = layout.offset_path(self.group, info.topic, info.partition)
                data = str(offset).encode()
                try:
                    self._zk.set(path, data)
                except NoNodeError:
                    try:
                        self._zk.create(path, data, makepath=True)
                    except NodeExistsError:
                        self._zk.set(path, data)
                info.committed_offset = offset
                written[(info.topic, info.partition)] = offset
        return written

    def _run_auto_commit(self) -> None:
        interval_s = self.config["auto.commit.interval.ms"] / 1000
        while not self._closing.wait(interval_s):
            try:
                self.commit_offsets()
            except KazooException as exc:
                log.warning("consumer %s: auto-commit failed: %r", self.consumer_id, exc)

    def __repr__(self) -> str:
        return f"ConsumerConnector(group={self.group!r}, id={self.consumer_id!r})"
