"""ZkMetadataCache: a broker's local view of the cluster in ZooKeeper, fed by kazoo watches.

Live brokers (/brokers/ids), the controller (/controller), every topic's replica assignment
(/brokers/topics/<t>), per-topic configs (/config/topics/<t>) and each partition's state (leader,
leader epoch, isr). Watch callbacks run in kazoo's threads: they only read the znode they were told
about (partition states with pipelined async reads) and hand the result to the event loop; the cache itself is only
read and changed on the event loop thread, so request handlers read it without locks.

Changes are coalesced: watch threads queue them and the loop applies everything queued in one callback,
then hands ``on_change`` what changed (CacheChanges: which topics, which partitions), so a broker failure
that rewrites P partition states costs the loop O(P) in a few callbacks, not a full pass per state.
It implements MetadataView, so Metadata responses are built from it as from the standalone registry.

kazoo re-arms DataWatch and ChildrenWatch after a session expiry, and fires the plain watches on partition
states when the connection drops, so the whole view is read again by itself on a new session.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from pipeline.zk.client import BoundedZk, ZooKeeperTimeout
from broker.metadata import NO_LEADER, NO_LEADER_EPOCH, BrokerEndpoint, PartitionView
from broker.coordinator.coordinator_placement import coordinator_for
from pipeline.zk import layout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionState:
    """A partition's leadership as the controller wrote it in ZooKeeper."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    # Where the state came from, not what it says (left out of equality): the controller epoch that wrote
    # it, and the znode's version when read (-1: not read from ZooKeeper), on which a leader's ISR write is
    # conditional.
    controller_epoch: int = field(default=0, compare=False)
    zk_version: int = field(default=-1, compare=False)


@dataclass
class ClusterTopic:
    """A topic as ZooKeeper describes it; ``states`` holds the partitions whose state was read."""

    name: str
    topic_id: str | None = None
    replicas: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    states: dict[int, PartitionState] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    @property
    def complete(self) -> bool:
        """Assignment and every partition's state are known."""
        return bool(self.replicas) and all(p in self.states for p in self.replicas)


@dataclass
class CacheChanges:
    """What one batch of applied watch events changed: topics (created, deleted, or their assignment,
    config or id) and single partition states; ``brokers`` when the live brokers changed, ``shutting_down`` when
    the brokers in a controlled shutdown did."""

    topics: set[str] = field(default_factory=set)
    partitions: set[tuple[str, int]] = field(default_factory=set)
    brokers: bool = False
    shutting_down: bool = False


def parse_partition_state(data: bytes | None, zk_version: int = -1) -> PartitionState | None:
    """The state a controller (or the leader, for its ISR) wrote in a partition's state znode; None for an
    empty or missing one."""
    value = layout.decode(data)
    if not value:
        return None
    return PartitionState(int(value["leader"]), int(value["leader_epoch"]), tuple(value.get("isr", ())),
                          int(value.get("controller_epoch", 0)), zk_version)


class ZkMetadataCache:
    """The cluster as this broker sees it, kept current by ZooKeeper watches, read on the event loop."""

    def __init__(self, zk: BoundedZk, loop: asyncio.AbstractEventLoop,
                 on_change: Callable[[CacheChanges], None] | None = None,
                 inter_broker_listener: str = "PLAINTEXT") -> None:
        self._zk = zk
        self._loop = loop
        # The listener whose address a broker's BrokerEndpoint host and port are (what followers connect to).
        self._inter_broker_listener = inter_broker_listener
        # Called on the event loop after every applied batch of changes; None detaches (at shutdown).
        self.on_change = on_change
        self._queued: list[Callable[[CacheChanges], None]] = []
        self._queue_lock = threading.Lock()
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.controller_id = NO_LEADER
        # Brokers in a controlled shutdown (/admin/controlled_shutdown/<id>): leaders do not take them back
        # into an ISR the controller took them out of.
        self.shutting_down: frozenset[int] = frozenset()
        self.cluster_id = ""
        self.topics: dict[str, ClusterTopic] = {}
        self._brokers_seen = False
        self._topics_seen = False
        self._changed = asyncio.Event()
        # Watch-thread side: the generation token of each watched topic (a recreated topic gets a new one),
        # the read of every followed partition state, and those whose last read was lost with the connection.
        self._watched: dict[str, object] = {}
        self._state_readers: dict[tuple[str, int], Callable[[], None]] = {}
        self._unread: set[tuple[str, int]] = set()
        self._readers_lock = threading.Lock()
        self._connected = True

    # -- start-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Install the watches (call from a worker thread: the first reads are synchronous)."""
        client = self._zk.client
        client.add_listener(self._on_session)
        ChildrenWatch(client, layout.BROKER_IDS, self._watch_brokers)
        ChildrenWatch(client, layout.BROKER_TOPICS, self._watch_topics)
        DataWatch(client, layout.CONTROLLER, self._watch_controller)
        ChildrenWatch(client, layout.ADMIN_CONTROLLED_SHUTDOWN, self._watch_shutting_down)

    @property
    def loaded(self) -> bool:
        """Brokers, topics and every topic's partition states have been read at least once."""
        return self._brokers_seen and self._topics_seen and all(t.complete for t in self.topics.values())

    async def wait_for(self, condition: Callable[[], object], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds after some applied change, or the timeout; True if it holds."""
        loop = self._loop
        deadline = loop.time() + timeout_s
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                return bool(condition())
        return True

    # -- reads (event loop) -----------------------------------------------------------------------

    def live_brokers(self) -> list[BrokerEndpoint]:
        return [self.brokers[b] for b in sorted(self.brokers)]

    @property
    def connected(self) -> bool:
        """Whether the ZooKeeper session is connected (the view is current)."""
        return self._connected

    def group_coordinator(self, group_id: str) -> BrokerEndpoint | None:
        """The broker that coordinates ``group_id``: chosen among the live brokers not in a controlled shutdown."""
        eligible = [b for b in self.brokers if b not in self.shutting_down] or list(self.brokers)
        chosen = coordinator_for(group_id, eligible)
        return None if chosen is None else self.brokers[chosen]

    def partition_state(self, topic: str, index: int) -> PartitionState | None:
        info = self.topics.get(topic)
        return None if info is None else info.states.get(index)

    def is_known(self, topic: str, index: int) -> bool:
        info = self.topics.get(topic)
        return info is not None and index in info.replicas

    # -- MetadataView -----------------------------------------------------------------------------

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def topic_configs(self, name: str) -> dict[str, str] | None:
        topic = self.topics.get(name)
        return None if topic is None else dict(topic.configs)

    def describe_topic(self, name: str) -> list[PartitionView] | None:
        """Leaders as ZooKeeper names them, if alive, with their leader epochs (clients validate their
        positions with OffsetForLeaderEpoch after a leader change), and the live members of the ISR."""
        topic = self.topics.get(name)
        if topic is None:
            return None
        live = self.brokers
        views = []
        for index, replicas in sorted(topic.replicas.items()):
            state = topic.states.get(index)
            leader = state.leader if state is not None and state.leader in live else NO_LEADER
            epoch = state.leader_epoch if leader != NO_LEADER else NO_LEADER_EPOCH
            views.append(PartitionView(index, leader, epoch, tuple(replicas),
                                       tuple(b for b in state.isr if b in live) if state is not None else (),
                                       tuple(b for b in replicas if b not in live)))
        return views

    # -- watch callbacks (kazoo threads) ----------------------------------------------------------

    def _post(self, change: Callable[[CacheChanges], None]) -> None:
        """Queue a change for the loop; the first one queued schedules the callback that applies them all."""
        with self._queue_lock:
            self._queued.append(change)
            if len(self._queued) > 1:
                return
        try:
            self._loop.call_soon_threadsafe(self._apply_queued)
        except RuntimeError:
            pass  # the loop is closed: the broker is shutting down

    def _apply_queued(self) -> None:
        with self._queue_lock:
            queued, self._queued = self._queued, []
        changes = CacheChanges()
        for change in queued:
            change(changes)
        self._changed.set()
        if self.on_change is not None:
            try:
                self.on_change(changes)
            except Exception:
                log.exception("applying a cluster metadata change failed")

    def _watch_brokers(self, children: list[str]) -> None:
        # Registrations are read again on every change (all at once): a broker that left and came back
        # between two watch events may have a new address.
        client = self._zk.client
        ids = [int(child) for child in children]
        try:
            found = self._zk.all(client.get_async(layout.broker_path(b)) for b in ids)
        except ZooKeeperTimeout as exc:
            log.warning("could not read the broker registrations: %s", exc)
            found = [exc] * len(ids)
        read: dict[int, BrokerEndpoint] = {}
        unread: list[int] = []
        for broker_id, result in zip(ids, found):
            if isinstance(result, NoNodeError):
                continue
            if isinstance(result, Exception):
                unread.append(broker_id)
                continue
            read[broker_id] = self._endpoint(broker_id, layout.decode(result[0]))

        def apply(changes: CacheChanges) -> None:
            # A registration that could not be read keeps the address known so far.
            kept = {b: self.brokers[b] for b in unread if b in self.brokers}
            self.brokers = dict(sorted({**kept, **read}.items()))
            self._brokers_seen = True
            changes.brokers = True
        self._post(apply)

    def _endpoint(self, broker_id: int, registration: dict) -> BrokerEndpoint:
        """A registration as a BrokerEndpoint: its inter-broker listener's address (the registration's host and
        port if it has none such) and every listener's."""
        listeners = layout.registration_endpoints(registration)
        host, port = listeners.get(self._inter_broker_listener) or (registration["host"], int(registration["port"]))
        return BrokerEndpoint(broker_id, host, port, tuple((name, h, p) for name, (h, p) in listeners.items()))

    def _watch_controller(self, data: bytes | None, stat: object) -> None:
        value = layout.decode(data)
        controller = int(value["brokerid"]) if value else NO_LEADER

        def apply(changes: CacheChanges) -> None:
            self.controller_id = controller
        self._post(apply)

    def _watch_shutting_down(self, children: list[str]) -> None:
        ids = frozenset(int(child) for child in children if child.isascii() and child.isdigit())

        def apply(changes: CacheChanges) -> None:
            self.shutting_down = ids
            changes.shutting_down = True
        self._post(apply)

    def _watch_topics(self, children: list[str]) -> None:
        current = set(children)
        for name in [t for t in self._watched if t not in current]:
            del self._watched[name]
        new = [t for t in children if t not in self._watched]
        for name in new:
            self._watched[name] = object()

        def apply(changes: CacheChanges) -> None:
            for name in [t for t in self.topics if t not in current]:
                del self.topics[name]
                changes.topics.add(name)
            for name in new:
                self.topics[name] = ClusterTopic(name)
                changes.topics.add(name)
            self._topics_seen = True
        self._post(apply)
        for name in new:
            self._watch_topic(name, self._watched[name])

    def _watch_state(self, name: str, index: int, token: object) -> None:
        """Follow one partition's state znode with kazoo's async reads: a change costs one read that does not
        wait for the others (hundreds of states changing at once are read pipelined), and nothing blocks
        kazoo's callback thread. When the connection drops, kazoo fires every watch (so each state is read
        again, on the new session if the old one expired); a read that fails meanwhile is issued again once
        the client is connected (``_on_session``)."""
        client = self._zk.client
        path = layout.partition_state_path(name, index)
        key = (name, index)

        def wanted() -> bool:
            if self._watched.get(name) is token:
                return True
            with self._readers_lock:
                if self._state_readers.get(key) is read:
                    del self._state_readers[key]
            return False

        def on_event(event: WatchedEvent) -> None:
            if wanted():
                read()

        def read() -> None:
            client.get_async(path, watch=on_event).rawlink(on_read)

        def on_created(result: IAsyncResult) -> None:
            if result.successful() and result.value is not None and wanted():
                read()  # created between the read and the watch on its existence

        def on_read(result: IAsyncResult) -> None:
            if not wanted():
                return
            if result.successful():
                state = parse_partition_state(result.value[0], result.value[1].version)
            elif isinstance(result.exception, NoNodeError):
                state = None
                client.exists_async(path, watch=on_event).rawlink(on_created)
            else:
                # The connection or the session was lost: read again once connected.
                with self._readers_lock:
                    if not self._connected:
                        self._unread.add(key)
                        return
                read()
                return

            def apply(changes: CacheChanges) -> None:
                topic = self.topics.get(name)
                if topic is None:
                    return
                if state is None:
                    topic.states.pop(index, None)
                else:
                    topic.states[index] = state
                changes.partitions.add(key)
            self._post(apply)

        with self._readers_lock:
            self._state_readers[key] = read
        read()

    def _on_session(self, state: str) -> None:
        with self._readers_lock:
            self._connected = state == KazooState.CONNECTED
            again = [self._state_readers[k] for k in self._unread if k in self._state_readers]
            if self._connected:
                self._unread.clear()
        if self._connected:
            for read in again:
                read()

    def _watch_topic(self, name: str, token: object) -> None:
        watched_partitions: set[int] = set()

        def on_config(data: bytes | None, stat: object) -> bool | None:
            if self._watched.get(name) is not token:
                return False
            configs = layout.parse_topic_config(data)

            def apply(changes: CacheChanges) -> None:
                topic = self.topics.get(name)
                if topic is not None:
                    topic.configs = configs
                    changes.topics.add(name)
            self._post(apply)
            return None

        def on_assignment(data: bytes | None, stat: object) -> bool | None:
            if self._watched.get(name) is not token:
                return False
            if data is None:
                return None
            replicas = layout.parse_topic_assignment(data)
            topic_id = layout.parse_topic_id(data)

            def apply(changes: CacheChanges) -> None:
                topic = self.topics.get(name)
                if topic is not None:
                    topic.replicas = replicas
                    topic.topic_id = topic_id
                    changes.topics.add(name)
            self._post(apply)
            for index in sorted(replicas):
                if index not in watched_partitions:
                    watched_partitions.add(index)
                    self._watch_state(name, index, token)
            return None

        # Config first: when the partitions appear, their logs are created with the topic's overrides.
        DataWatch(self._zk.client, layout.topic_config_path(name), on_config)
        DataWatch(self._zk.client, layout.topic_path(name), on_assignment)
