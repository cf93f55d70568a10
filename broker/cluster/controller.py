"""KafkaController: the one broker that assigns partitions and decides leadership, elected through ZooKeeper.

Every broker runs one. It competes for the ephemeral /controller znode whenever that node is absent
(at start, when the controller dies, after this broker's own session expired); the winner bumps
/controller_epoch and acts until its session ends:

- creation requests under /admin/create_topics/<t>: replica lists round-robin over the live brokers,
  written with every partition's state (every replica in the ISR) in one ZooKeeper transaction (config
  first, in /config/topics);
- deletion requests under /admin/delete_topics/<t>: the topic's znodes removed in one transaction;
- partitions added to a topic's assignment in /brokers/topics/<t> (CreatePartitions; every topic znode is
  watched, Kafka's PartitionModificationsHandler): each new partition gets its state znode, its live
  replicas in the ISR, the first of them the leader (none if no replica is alive: started when one comes);
- broker changes under /brokers/ids and controlled shutdowns under /admin/controlled_shutdown/<id>: the
  decisions of elections.py (leaders elected from the ISR only unless unclean.leader.election.enable, dead
  or shutting-down followers out of the ISR), then each shutting-down broker told how many partitions it
  still leads; a broker registered anew since the last look (a restart that registered as soon as its old
  session's node went) is failed over first, then taken back (Kafka's bounced brokers, KIP-380);
- ISR change notifications under /isr_change_notification (leaders write their ISR changes themselves):
  the named states read again, the notifications removed;
- preferred replica election requests (/admin/preferred_replica_election) and, with
  auto.leader.rebalance.enable, a check every leader.imbalance.check.interval.seconds;
- partition reassignment requests (/admin/reassign_partitions), one step of reassignment.py per pass.

The offline and preferred-replica-imbalance partition counts are kept for the broker's metrics.

All of it runs on one thread fed by a queue (Kafka's controller event loop): watch callbacks only
enqueue, so decisions never race each other and kazoo's threads never block on controller work.
Every ZooKeeper call is bounded (BoundedZk) and reads and writes of many znodes are pipelined: a broker
change costs a few round trips, not a few per partition. Every write is a transaction that first checks
the version of /controller_epoch this controller wrote when it was elected (Kafka's zkVersion check), so
a controller that lost its session and does not know it yet cannot overwrite its successor's decisions.
An event that fails (ZooKeeper slow or gone, a partition changed under it) is retried with backoff; a
creation that cannot be carried out (over ZooKeeper's request size limit) is refused, never retried.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.recipe.watchers import DataWatch

from broker.cluster import elections
from broker.cluster.reassignment import ReassignmentStep, reassignment_step, valid_target
from broker.cluster.metadata_cache import PartitionState, parse_partition_state
from pipeline.error_text import describe_error
from pipeline.zk.client import BoundedZk, ZooKeeperTimeout
from pipeline.protocol.errors import ErrorCode
from pipeline.zk import layout

log = logging.getLogger(__name__)


def assign_replicas(live_brokers: list[int], partitions: int, replication_factor: int,
                    start: int = 0) -> dict[int, list[int]]:
    """Round-robin replica lists: partition p's first replica is the (start + p)-th live broker."""
    brokers = sorted(live_brokers)
    if not 1 <= replication_factor <= len(brokers):
        raise ValueError(f"replication factor {replication_factor} needs 1..{len(brokers)} live brokers")
    count = len(brokers)
    return {p: [brokers[(start + p + r) % count] for r in range(replication_factor)] for p in range(partitions)}


def request_error(code: int, message: str) -> bytes:
    """What the controller writes into a request it refuses; the requesting broker reads and removes it."""
    return layout.encode({"version": 1, "error_code": int(code), "error_message": message})


# What parsing a znode written by something else than this code raises (bad JSON, wrong fields or types).
MALFORMED = (ValueError, KeyError, TypeError, AttributeError)
# Backoff of a failed event: doubles from the first value up to the second.
RETRY_BACKOFF_S = (0.1, 5.0)
# Partition states written per ZooKeeper transaction on a broker change (each ~200 bytes of the 1 MB limit).
WRITE_BATCH = 500


@dataclass(frozen=True)
class KnownPartition:
    """What the controller knows of a partition: replicas, the state it last read or wrote, and that
    state's znode version (its writes are conditional on it)."""

    replicas: list[int]
    state: PartitionState | None
    version: int


@dataclass(frozen=True)
class ControllerSettings:
    """The broker properties the controller acts on."""

    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_percentage: int = 10

    @classmethod
    def from_config(cls, config: Any) -> "ControllerSettings":
        """The settings of a KafkaConfig (anything indexable by property name)."""
        return cls(bool(config["unclean.leader.election.enable"]), bool(config["auto.leader.rebalance.enable"]),
                   float(config["leader.imbalance.check.interval.seconds"]),
                   int(config["leader.imbalance.per.broker.percentage"]))


class ControllerFenced(Exception):
    """/controller_epoch moved on: another broker was elected since this one was."""


class RetryLater(Exception):
    """An event could not be carried out completely for a passing reason; it runs again after a backoff."""


class KafkaController:
    """Controller election and, while elected, the controller's duties, on one event thread."""

    def __init__(self, zk: BoundedZk, broker_id: int, settings: ControllerSettings | None = None) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self.settings = settings or ControllerSettings()
        # Live brokers and those in controlled shutdown, as last read (the event thread's).
        self._live: set[int] = set()
        # The creation zxid of each live broker's registration, as last read while elected: another one is a
        # broker that registered anew, so it died in between.
        self._registered: dict[int, int] = {}
        self._shutting_down: set[int] = set()
        self._offline_count = 0
        self._imbalance_count = 0
        self._rebalance_timer: threading.Timer | None = None
        # Partitions named by the pending reassignment request (the automatic rebalance leaves them alone).
        self._moving: set[tuple[str, int]] = set()
        self.epoch = 0
        self._epoch_version = -1
        self._active = False
        self._generation = 0
        self._watchers: dict[str, Callable[[WatchedEvent], None]] = {}
        # Every partition's replicas and state while elected (Kafka's controller context): read once per term,
        # then kept up to date by this controller's own writes, the only writes partition states get.
        self._partitions: dict[tuple[str, int], KnownPartition] | None = None
        self._events: queue.Queue[tuple[str, object] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller-event-thread", daemon=True)
        self._stopped = False
        self._failures: dict[str, int] = {}
        self._retry_timers: dict[str, threading.Timer] = {}

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def offline_partition_count(self) -> int:
        """Partitions without a live leader (Kafka's OfflinePartitionsCount); 0 unless this is the controller."""
        return self._offline_count if self._active else 0

    @property
    def preferred_replica_imbalance_count(self) -> int:
        """Partitions not led by their first replica (Kafka's PreferredReplicaImbalanceCount); 0 unless this is
        the controller."""
        return self._imbalance_count if self._active else 0

    def start(self) -> None:
        self._thread.start()
        self._zk.client.add_listener(self._on_session_state)
        DataWatch(self._zk.client, layout.CONTROLLER, self._on_controller_node)

    def stop(self) -> None:
        self._stopped = True
        self._zk.client.remove_listener(self._on_session_state)
        for timer in list(self._retry_timers.values()) + [self._rebalance_timer]:
            if timer is not None:
                timer.cancel()
        self._events.put(None)
        self._thread.join(10)

    # -- kazoo threads: enqueue only --------------------------------------------------------------

    def _on_controller_node(self, data: bytes | None, stat: object) -> bool | None:
        if self._stopped:
            return False
        if data is None:
            self._events.put(("elect", None))
        return None

    def _on_session_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._events.put(("resign", None))
        elif state == KazooState.CONNECTED:
            self._events.put(("elect", None))

    def _watcher(self, kind: str) -> Callable[[WatchedEvent], None]:
        """One watch function per event kind and term: kazoo keeps a function once per path, so reading
        with it again re-arms the watch without stacking duplicates."""
        watcher = self._watchers.get(kind)
        if watcher is None:
            generation = self._generation

            def on_event(event: WatchedEvent) -> None:
                if not self._stopped and generation == self._generation:
                    self._events.put((kind, None))
            watcher = self._watchers[kind] = on_event
        return watcher

    # -- the event thread -------------------------------------------------------------------------

    def _run(self) -> None:
        handlers = {"elect": self._elect, "resign": self._resign, "brokers": self._on_brokers_change,
                    "create": self._on_create_requests, "delete": self._on_delete_requests,
                    "partitions": self._on_partition_modifications, "isr_change": self._on_isr_changes,
                    "preferred": self._on_preferred_election, "rebalance": self._on_rebalance_check,
                    "reassign": self._on_reassignment}
        while True:
            event = self._events.get()
            if event is None or self._stopped:
                return
            kind, _ = event
            if kind not in ("elect", "resign") and not self._active:
                continue
            self._retry_timers.pop(kind, None)
            try:
                handlers[kind]()
            except ControllerFenced:
                log.warning("broker %d was fenced: another controller was elected", self.broker_id)
                self._resign()
            except (RetryLater, ZooKeeperTimeout, KazooException) as exc:
                if self._stopped:
                    return
                self._retry(kind, exc)
            except Exception as exc:
                if self._stopped:
                    return
                log.exception("controller event %s failed", kind)
                self._retry(kind, exc)
            else:
                self._failures.pop(kind, None)
            finally:
                self._count_partitions()

    def _count_partitions(self) -> None:
        known = self._partitions
        if not self._active or known is None:
            return
        self._offline_count = sum(elections.is_offline(p.state, self._live) for p in known.values())
        self._imbalance_count = sum(elections.is_not_preferred(p.replicas, p.state) for p in known.values())

    def _retry(self, kind: str, reason: Exception) -> None:
        failures = self._failures[kind] = self._failures.get(kind, 0) + 1
        delay = min(RETRY_BACKOFF_S[1], RETRY_BACKOFF_S[0] * 2 ** (failures - 1))
        log.warning("controller event %s failed (%s); retrying in %.1fs", kind, describe_error(reason),
                    delay)
        if kind in self._retry_timers:
            return
        timer = threading.Timer(delay, self._events.put, args=((kind, None),))
        timer.daemon = True
        self._retry_timers[kind] = timer
        timer.start()

    def _elect(self) -> None:
        if self._active:
            if self._still_controller():
                return
            self._resign()
        while True:
            try:
                data, stat = self._zk.sync("get", layout.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self._zk.sync("create", layout.CONTROLLER_EPOCH, b"0", makepath=True)
                except NodeExistsError:
                    pass
                continue
            epoch = int(data.decode() or 0) + 1
            # Kafka's election: the ephemeral node and the epoch bump in one transaction.
            txn = self._zk.client.transaction()
            txn.create(layout.CONTROLLER, layout.controller_data(self.broker_id), ephemeral=True)
            txn.set_data(layout.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
            created, bumped = self._zk.wait(txn.commit_async())
            if isinstance(created, NodeExistsError):
                return
            if isinstance(bumped, BadVersionError):
                continue
            if isinstance(created, Exception) or isinstance(bumped, Exception):
                raise RetryLater(f"the election transaction failed: {created!r}, {bumped!r}")
            break
        self.epoch, self._epoch_version = epoch, bumped.version
        self._active = True
        self._generation += 1
        self._watchers = {}
        self._partitions = None
        self._registered = {}
        log.info("broker %d is the controller now (controller epoch %d)", self.broker_id, self.epoch)
        for kind in ("brokers", "create", "delete", "partitions", "isr_change", "preferred", "reassign"):
            self._events.put((kind, None))
        self._schedule_rebalance_check()

    def _resign(self) -> None:
        if self._active:
            log.info("broker %d is no longer the controller", self.broker_id)
        self._active = False
        self._generation += 1
        self._watchers = {}
        self._partitions = None
        self._moving = set()
        self._offline_count = self._imbalance_count = 0
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None

    def _still_controller(self) -> bool:
        try:
            data, stat = self._zk.sync("get", layout.CONTROLLER)
        except NoNodeError:
            return False
        return (layout.decode(data).get("brokerid") == self.broker_id
                and stat.ephemeralOwner == self._zk.client.client_id[0])

    def _fenced(self) -> TransactionRequest:
        """A transaction that only applies while /controller_epoch is still the one this controller wrote."""
        txn = self._zk.client.transaction()
        txn.check(layout.CONTROLLER_EPOCH, self._epoch_version)
        return txn

    def _check_fence(self, results: list[Any]) -> list[Any]:
        """The results of a ``_fenced`` transaction's own operations; ControllerFenced if the check failed."""
        if isinstance(results, Exception):
            raise results
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerFenced()
        return results[1:]

    def _children(self, path: str, kind: str) -> list[str]:
        """The children of ``path``, watched: a change enqueues ``kind``."""
        return self._zk.sync("get_children", path, watch=self._watcher(kind))

    # -- broker changes: leadership ---------------------------------------------------------------

    def _load_partitions(self) -> dict[tuple[str, int], KnownPartition]:
        """Every partition's replicas, state and state version, read with pipelined requests."""
        client = self._zk.client
        topics = self._zk.sync("get_children", layout.BROKER_TOPICS)
        assignments = self._zk.all(client.get_async(layout.topic_path(t)) for t in topics)
        partitions = [(topic, index, replicas)
                      for topic, found in zip(topics, assignments) if not isinstance(found, Exception)
                      for index, replicas in sorted(layout.parse_topic_assignment(found[0]).items())]
        states = self._zk.all(client.get_async(layout.partition_state_path(t, i)) for t, i, _ in partitions)
        return {(topic, index): KnownPartition(replicas, parse_partition_state(found[0]), found[1].version)
                for (topic, index, replicas), found in zip(partitions, states) if not isinstance(found, Exception)}

    def _known(self) -> dict[tuple[str, int], KnownPartition]:
        if self._partitions is None:
            self._partitions = self._load_partitions()
        return self._partitions

    def _set_state(self, txn: TransactionRequest, key: tuple[str, int], new: PartitionState) -> None:
        """Add the write of a partition's state, conditional on the version this controller knows, to ``txn``."""
        txn.set_data(layout.partition_state_path(*key),
                     layout.partition_state(new.leader, new.leader_epoch, list(new.isr), self.epoch),
                     version=self._known()[key].version)

    def _write_states(self, writes: list[tuple[tuple[str, int], PartitionState]]) -> None:
        """Write partition states, each conditional on the version this controller knows, in pipelined fenced
        transactions; RetryLater (what it knows forgotten) when a state changed under the controller."""
        known = self._known()
        pending = []
        for start in range(0, len(writes), WRITE_BATCH):
            txn = self._fenced()
            for key, new in writes[start:start + WRITE_BATCH]:
                self._set_state(txn, key, new)
            pending.append(txn.commit_async())
        failed = 0
        for start, results in zip(range(0, len(writes), WRITE_BATCH), self._zk.all(pending)):
            outcomes = self._check_fence(results)
            if any(isinstance(outcome, Exception) for outcome in outcomes):
                failed += len(outcomes)
                continue
            for ((topic, index), new), stat in zip(writes[start:start + WRITE_BATCH], outcomes):
                known[(topic, index)] = KnownPartition(known[(topic, index)].replicas, new, stat.version)
        log.info("%d partition state(s) written (live brokers %s, shutting down %s)", len(writes) - failed,
                 sorted(self._live), sorted(self._shutting_down))
        if failed:
            # Someone else changed a state: what this controller knows is stale, so read it all again.
            self._partitions = None
            raise RetryLater(f"{failed} partition state(s) changed under the controller")

    def _on_brokers_change(self) -> None:
        """Broker registrations or controlled-shutdown requests changed: elect, shrink ISRs, answer requests.

        A broker whose registration is not the one last read died and registered again in between: the list of
        ids alone does not show it (a restarted broker registers the moment its old node goes). It is failed
        over first, as if gone (its partitions led by other in-sync replicas, it out of their ISRs), then
        counted live again: it follows and catches up, as after any restart."""
        registered = self._registrations(self._children(layout.BROKER_IDS, "brokers"))
        bounced = {broker for broker, zxid in registered.items() if self._registered.get(broker, zxid) != zxid}
        self._registered = registered
        self._live = set(registered)
        requests = sorted(int(b) for b in self._children(layout.ADMIN_CONTROLLED_SHUTDOWN, "brokers"))
        self._shutting_down = set(requests) & self._live
        if bounced:
            log.info("broker(s) %s registered anew since the last look: failing them over first", sorted(bounced))
            self._elect_leaders(self._live - bounced)
        self._elect_leaders(self._live)
        self._answer_controlled_shutdowns(requests)

    def _registrations(self, names: list[str]) -> dict[int, int]:
        """Broker id -> the creation zxid of its registration, for those of ``names`` still registered."""
        ids = sorted(int(name) for name in names)
        stats = self._zk.all(self._zk.client.exists_async(layout.broker_path(broker)) for broker in ids)
        failed = [stat for stat in stats if isinstance(stat, Exception)]
        if failed:
            raise RetryLater(f"reading the brokers' registrations failed: {failed[0]!r}")
        return {broker: stat.czxid for broker, stat in zip(ids, stats) if stat is not None}

    def _elect_leaders(self, live: set[int]) -> None:
        """Write the partition states that ``live`` brokers (and those shutting down) call for."""
        unclean = self.settings.unclean_leader_election
        writes = [(key, new) for key, partition in sorted(self._known().items()) if partition.state is not None
                  and (new := elections.next_state(partition.replicas, partition.state, live,
                                                   self._shutting_down, unclean)) is not None]
        if writes:
            self._write_states(writes)

    def _answer_controlled_shutdowns(self, brokers: list[int]) -> None:
        """Tell each broker in controlled shutdown how many partitions it still leads (no one else to take them)."""
        known = self._known()
        pending = []
        for broker in brokers:
            remaining = sum(1 for p in known.values() if p.state is not None and p.state.leader == broker)
            txn = self._fenced()
            txn.set_data(layout.controlled_shutdown_path(broker), layout.controlled_shutdown_reply(remaining))
            pending.append(txn.commit_async())
        for broker, results in zip(brokers, self._zk.all(pending)):
            outcome = self._check_fence(results)[0]
            # A request that vanished belongs to a broker that stopped meanwhile: nothing to answer.
            if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
                raise RetryLater(f"answering broker {broker}'s controlled shutdown failed: {outcome!r}")

    # -- ISR changes made by leaders --------------------------------------------------------------

    def _on_isr_changes(self) -> None:
        """Re-read the states named by leaders' ISR change notifications, then remove the notifications."""
        client = self._zk.client
        paths = [f"{layout.ISR_CHANGE_NOTIFICATION}/{name}"
                 for name in sorted(self._children(layout.ISR_CHANGE_NOTIFICATION, "isr_change"))]
        if not paths:
            return
        notes = self._zk.all(client.get_async(path) for path in paths)
        known = self._known()
        keys = sorted({key for path, found in zip(paths, notes) if not isinstance(found, Exception)
                       for key in self._parse(layout.parse_partition_list, found[0], path) or () if key in known})
        states = self._zk.all(client.get_async(layout.partition_state_path(*key)) for key in keys)
        for key, found in zip(keys, states):
            if not isinstance(found, Exception):
                known[key] = KnownPartition(known[key].replicas, parse_partition_state(found[0]), found[1].version)
        txn = self._fenced()
        for path, found in zip(paths, notes):
            if not isinstance(found, Exception):
                txn.delete(path)
        failures = [r for r in self._check_fence(self._zk.wait(txn.commit_async()))
                    if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            raise RetryLater(f"removing ISR change notifications failed: {failures[0]!r}")
        log.info("ISR changes of %d partition(s) read", len(keys))
        # New replicas joining the ISR is what a reassignment waits for.
        self._events.put(("reassign", None))

    @staticmethod
    def _parse(parse: Callable[[bytes], Any], data: bytes, path: str) -> Any:
        """``parse(data)``, or None (logged) when the znode holds something else than its JSON."""
        try:
            return parse(data)
        except MALFORMED as exc:
            log.warning("ignoring malformed %s: %s", path, exc)
            return None

    # -- preferred replica election and automatic rebalance ---------------------------------------

    def _request(self, path: str, kind: str, parse: Callable[[bytes], Any]) -> tuple[Any, int] | None:
        """An admin request znode, watched (its creation included), parsed, and its version; None when absent
        or malformed (then removed: it could never be carried out)."""
        watch = self._watcher(kind)
        if not self._zk.sync("exists", path, watch=watch):
            return None
        try:
            data, stat = self._zk.sync("get", path, watch=watch)
        except NoNodeError:
            return None
        try:
            return parse(data), stat.version
        except MALFORMED as exc:
            log.warning("removing the malformed request %s: %s", path, exc)
            self._remove_request(path, stat.version)
            return None

    def _remove_request(self, path: str, version: int) -> None:
        txn = self._fenced()
        txn.delete(path, version=version)
        outcome = self._check_fence(self._zk.wait(txn.commit_async()))[0]
        if isinstance(outcome, BadVersionError):
            raise RetryLater(f"{path} changed while it was carried out")
        if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
            raise RetryLater(f"removing {path} failed: {outcome!r}")

    def _elect_preferred(self, keys: list[tuple[str, int]]) -> int:
        known = self._known()
        eligible = self._live - self._shutting_down
        writes = [(key, new) for key in keys if (partition := known.get(key)) is not None
                  and partition.state is not None
                  and (new := elections.preferred_state(partition.replicas, partition.state, eligible)) is not None]
        if writes:
            self._write_states(writes)
        return len(writes)

    def _on_preferred_election(self) -> None:
        """A preferred replica election request: the first replica of each named partition (all when none are
        named) becomes its leader where it is live and in the ISR; the request is removed when done."""
        request = self._request(layout.ADMIN_PREFERRED_REPLICA_ELECTION, "preferred", layout.parse_partition_list)
        if request is None:
            return
        named, version = request
        elected = self._elect_preferred(sorted(named) if named else sorted(self._known()))
        self._remove_request(layout.ADMIN_PREFERRED_REPLICA_ELECTION, version)
        log.info("preferred replica election: %d leader(s) moved", elected)

    def _schedule_rebalance_check(self) -> None:
        if not self.settings.auto_leader_rebalance or self._stopped:
            return
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
        timer = threading.Timer(self.settings.imbalance_check_interval_s, self._events.put,
                                args=(("rebalance", None),))
        timer.daemon = True
        self._rebalance_timer = timer
        timer.start()

    def _on_rebalance_check(self) -> None:
        """auto.leader.rebalance.enable: preferred replica elections for the partitions preferring a broker over
        leader.imbalance.per.broker.percentage (partitions being reassigned are left alone)."""
        self._schedule_rebalance_check()
        known = self._known()
        brokers = elections.imbalanced_brokers(((p.replicas, p.state) for p in known.values()),
                                               self.settings.imbalance_percentage)
        keys = [key for key, p in sorted(known.items())
                if p.replicas and p.replicas[0] in brokers and key not in self._moving]
        if keys and self._elect_preferred(keys):
            log.info("leader rebalance for imbalanced broker(s) %s", sorted(brokers))

    # -- partition reassignment ----------------------------------------------------------------------

    def _on_reassignment(self) -> None:
        """Carry the reassignment request one step further for each partition it names (see reassignment.py);
        entries that are done leave the request, which is removed once empty."""
        request = self._request(layout.ADMIN_REASSIGN_PARTITIONS, "reassign", layout.parse_reassignment)
        if request is None:
            self._moving = set()
            return
        entries, version = request
        self._moving = set(entries)
        known = self._known()
        eligible = self._live - self._shutting_down
        steps: dict[tuple[str, int], ReassignmentStep] = {}
        for key, target in sorted(entries.items()):
            partition = known.get(key)
            if partition is None or not valid_target(target, self._live, partition.replicas):
                log.warning("dropping the reassignment of %s-%d to %s: no such partition, or not distinct live "
                            "brokers", *key, target)
                steps[key] = ReassignmentStep(done=True)
                continue
            steps[key] = reassignment_step(partition.replicas, target, partition.state, eligible)
        failed = self._write_steps(steps)
        remaining = {key: target for key, target in entries.items() if not steps[key].done or key[0] in failed}
        if remaining != entries:
            txn = self._fenced()
            if remaining:
                txn.set_data(layout.ADMIN_REASSIGN_PARTITIONS, layout.reassignment_request(remaining), version=version)
            else:
                txn.delete(layout.ADMIN_REASSIGN_PARTITIONS, version=version)
            outcome = self._check_fence(self._zk.wait(txn.commit_async()))[0]
            if isinstance(outcome, Exception):
                raise RetryLater(f"updating the reassignment request failed: {outcome!r}")
            log.info("reassignment: %d partition(s) done, %d to go", len(entries) - len(remaining), len(remaining))
        if failed:
            self._partitions = None
            raise RetryLater(f"reassignment writes for topic(s) {', '.join(sorted(failed))} failed")

    def _write_steps(self, steps: dict[tuple[str, int], ReassignmentStep]) -> set[str]:
        """Write each topic's new replica lists and states in one fenced transaction per topic (pipelined);
        the topics whose transaction failed."""
        client = self._zk.client
        known = self._known()
        topics = sorted({key[0] for key, step in steps.items() if step.replicas is not None or step.state})
        found = self._zk.all(client.get_async(layout.topic_path(topic)) for topic in topics)
        pending, failed = {}, set()
        for topic, current in zip(topics, found):
            if isinstance(current, Exception):
                failed.add(topic)
                continue
            data, stat = current
            replicas = layout.parse_topic_assignment(data)
            txn = self._fenced()
            for (name, index), step in steps.items():
                if name == topic and step.replicas is not None:
                    replicas[index] = step.replicas
                if name == topic and step.state is not None:
                    self._set_state(txn, (name, index), step.state)
            txn.set_data(layout.topic_path(topic), layout.topic_assignment(replicas, layout.parse_topic_id(data)),
                         version=stat.version)
            pending[topic] = (replicas, txn.commit_async())
        for topic, (replicas, async_result) in pending.items():
            outcomes = self._check_fence(self._zk.wait(async_result))
            if any(isinstance(outcome, Exception) for outcome in outcomes):
                failed.add(topic)
                continue
            stats = iter(outcomes)
            for (name, index), step in steps.items():
                if name != topic:
                    continue
                partition = known[(name, index)]
                state, version = partition.state, partition.version
                if step.state is not None:
                    state, version = step.state, next(stats).version
                known[(name, index)] = KnownPartition(replicas[index], state, version)
        return failed

    # -- partitions added to existing topics ------------------------------------------------------

    def _on_partition_modifications(self) -> None:
        """Start every partition in a topic's assignment that has no state yet (CreatePartitions)."""
        client = self._zk.client
        watch = self._watcher("partitions")
        topics = self._children(layout.BROKER_TOPICS, "partitions")
        assignments = self._zk.all(client.get_async(layout.topic_path(t), watch=watch) for t in topics)
        if self._partitions is None:
            self._partitions = self._load_partitions()
        known = self._partitions
        new = {(topic, index): replicas
               for topic, found in zip(topics, assignments) if not isinstance(found, Exception)
               for index, replicas in layout.parse_topic_assignment(found[0]).items()
               if (topic, index) not in known}
        if not new:
            return
        live = {int(b) for b in self._zk.sync("get_children", layout.BROKER_IDS)}
        states = {key: elections.creation_state(replicas, live) for key, replicas in new.items()}
        keys = sorted(new)
        pending = []
        for start in range(0, len(keys), WRITE_BATCH):
            txn = self._fenced()
            for topic, index in keys[start:start + WRITE_BATCH]:
                state = states[(topic, index)]
                for path, value in layout.partition_creation_ops(topic, index, state.leader, list(state.isr),
                                                                 self.epoch):
                    txn.create(path, value)
            pending.append(txn.commit_async())
        failed = 0
        for start, results in zip(range(0, len(keys), WRITE_BATCH), self._zk.all(pending)):
            batch = keys[start:start + WRITE_BATCH]
            if any(isinstance(r, Exception) for r in self._check_fence(results)):
                failed += len(batch)
                continue
            for key in batch:
                known[key] = KnownPartition(new[key], states[key], 0)
        log.info("started %d new partition(s) of existing topics", len(keys) - failed)
        if failed:
            # A state was written by someone else (or the topic went away): read everything again.
            self._partitions = None
            raise RetryLater(f"{failed} new partition(s) could not be started")

    # -- topic creation and deletion --------------------------------------------------------------

    def _on_create_requests(self) -> None:
        self._each_request(self._children(layout.ADMIN_CREATE_TOPICS, "create"), self._create_topic)

    def _on_delete_requests(self) -> None:
        self._each_request(self._children(layout.ADMIN_DELETE_TOPICS, "delete"), self._delete_topic)

    def _each_request(self, topics: list[str], handle: Callable[[str], None]) -> None:
        """Handle every request; one that fails for a passing reason does not hold up the others."""
        failed: list[str] = []
        for topic in sorted(topics):
            try:
                handle(topic)
            except (RetryLater, ZooKeeperTimeout, KazooException) as exc:
                log.warning("request for topic %s: %s", topic, describe_error(exc))
                failed.append(topic)
        if failed:
            raise RetryLater(f"request(s) for {', '.join(failed)} will be tried again")

    def _create_topic(self, topic: str) -> None:
        request_path = layout.create_topic_request_path(topic)
        try:
            data, _ = self._zk.sync("get", request_path)
        except NoNodeError:
            return
        request = layout.decode(data)
        if "error_code" in request:
            return
        if self._zk.sync("exists", layout.topic_path(topic)):
            self._refuse(request_path, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic!r} already exists")
            return
        live = sorted(int(b) for b in self._zk.sync("get_children", layout.BROKER_IDS))
        partitions, factor = int(request["partitions"]), int(request["replication_factor"])
        if not 1 <= factor <= len(live):
            self._refuse(request_path, ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"replication factor {factor} is larger than the {len(live)} live broker(s)")
            return
        if partitions < 1 or layout.estimated_creation_bytes(topic, partitions, factor) > layout.MAX_REQUEST_BYTES:
            self._refuse(request_path, ErrorCode.INVALID_PARTITIONS,
                         f"{partitions} partitions cannot be created in one ZooKeeper transaction")
            return
        replicas = assign_replicas(live, partitions, factor, start=random.randrange(len(live)))
        config_path = layout.topic_config_path(topic)
        configs = layout.topic_config(request.get("configs", {}))
        ops = layout.topic_creation_ops(topic, replicas, uuid.uuid4().hex, self.epoch)
        size = layout.transaction_bytes(ops + [(config_path, configs), (request_path, b"")])
        if size > layout.MAX_REQUEST_BYTES:
            self._refuse(request_path, ErrorCode.INVALID_REQUEST,
                         f"creating topic {topic!r} takes a {size}-byte ZooKeeper transaction, more than ZooKeeper's "
                         f"{layout.MAX_REQUEST_BYTES}-byte limit")
            return
        txn = self._fenced()
        if self._zk.sync("exists", config_path):
            txn.set_data(config_path, configs)
        else:
            txn.create(config_path, configs)
        for path, value in ops:
            txn.create(path, value)
        txn.delete(request_path)
        failures = [r for r in self._check_fence(self._zk.wait(txn.commit_async()))
                    if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            if isinstance(failures[0], NoNodeError) and not self._zk.sync("exists", request_path):
                log.info("not creating topic %s: its request was withdrawn", topic)
                return
            raise RetryLater(f"creating topic {topic} failed in ZooKeeper: {failures[0]!r}")
        if self._partitions is not None:
            for index, replica_list in replicas.items():
                self._partitions[(topic, index)] = KnownPartition(
                    replica_list, elections.creation_state(replica_list, set(replica_list)), 0)
        log.info("created topic %s: %d partition(s) over brokers %s", topic, partitions, live)

    def _refuse(self, request_path: str, code: int, message: str) -> None:
        log.info("refusing %s: %s", request_path, message)
        try:
            self._zk.sync("set", request_path, request_error(code, message))
        except NoNodeError:
            pass

    def _delete_topic(self, topic: str) -> None:
        client = self._zk.client
        partitions_path = layout.partitions_path(topic)
        try:
            indexes = self._zk.sync("get_children", partitions_path)
        except NoNodeError:
            indexes = None
        children = self._zk.all(client.get_children_async(f"{partitions_path}/{i}") for i in indexes or ())
        txn = self._fenced()
        for index, found in zip(indexes or (), children):
            for child in [] if isinstance(found, Exception) else found:
                txn.delete(f"{partitions_path}/{index}/{child}")
            txn.delete(f"{partitions_path}/{index}")
        if indexes is not None:
            txn.delete(partitions_path)
        topic_exists, config_exists = self._zk.all([client.exists_async(layout.topic_path(topic)),
                                                    client.exists_async(layout.topic_config_path(topic))])
        if topic_exists:
            txn.delete(layout.topic_path(topic))
        if config_exists:
            txn.delete(layout.topic_config_path(topic))
        txn.delete(layout.delete_topic_request_path(topic))
        failures = [r for r in self._check_fence(self._zk.wait(txn.commit_async()))
                    if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            raise RetryLater(f"deleting topic {topic} failed in ZooKeeper: {failures[0]!r}")
        if self._partitions is not None:
            for key in [k for k in self._partitions if k[0] == topic]:
                del self._partitions[key]
        log.info("deleted topic %s", topic)
