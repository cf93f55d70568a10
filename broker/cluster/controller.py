"""KafkaController: the one broker that assigns partitions and decides leadership, elected through ZooKeeper.

Every broker runs one. It competes for the ephemeral /controller znode whenever that node is absent
(at start, when the controller dies, after this broker's own session expired); the winner bumps
/controller_epoch and acts until its session ends:

- creation requests under /admin/create_topics/<t>: replica lists round-robin over the live brokers,
  written with every partition's state in one ZooKeeper transaction (config first, in /config/topics);
- deletion requests under /admin/delete_topics/<t>: the topic's znodes removed in one transaction;
- broker changes under /brokers/ids: partitions led by a departed broker go offline (leader -1,
  epoch + 1); offline partitions with a live replica get it as leader (epoch + 1).

All of it runs on one thread fed by a queue (Kafka's controller event loop): watch callbacks only
enqueue, so decisions never race each other and kazoo's threads never block on controller work.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import uuid
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.cluster.metadata_cache import NO_LEADER, parse_partition_state
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


class KafkaController:
    """Controller election and, while elected, the controller's duties, on one event thread."""

    def __init__(self, zk: KazooClient, broker_id: int) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self.epoch = 0
        self._active = False
        self._generation = 0
        self._events: queue.Queue[tuple[str, object] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller-event-thread", daemon=True)
        self._stopped = False

    @property
    def is_active(self) -> bool:
        return self._active

    def start(self) -> None:
        self._thread.start()
        self._zk.add_listener(self._on_session_state)
        DataWatch(self._zk, layout.CONTROLLER, self._on_controller_node)

    def stop(self) -> None:
        self._stopped = True
        self._zk.remove_listener(self._on_session_state)
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

    def _watch(self, kind: str) -> Callable[[list[str]], bool | None]:
        generation = self._generation

        def on_children(children: list[str]) -> bool | None:
            if self._stopped or generation != self._generation:
                return False
            self._events.put((kind, None))
            return None
        return on_children

    # -- the event thread -------------------------------------------------------------------------

    def _run(self) -> None:
        handlers = {"elect": self._elect, "resign": self._resign, "brokers": self._on_brokers_change,
                    "create": self._on_create_requests, "delete": self._on_delete_requests}
        while True:
            event = self._events.get()
            if event is None or self._stopped:
                return
            kind, _ = event
            if kind not in ("elect", "resign") and not self._active:
                continue
            try:
                handlers[kind]()
            except Exception:
                if self._stopped:
                    return
                log.exception("controller event %s failed; retrying after the next change", kind)
                if self._active and not self._still_controller():
                    self._resign()

    def _elect(self) -> None:
        if self._active:
            if self._still_controller():
                return
            self._resign()
        try:
            self._zk.create(layout.CONTROLLER, layout.controller_data(self.broker_id), ephemeral=True)
        except NodeExistsError:
            return
        self.epoch = self._bump_epoch()
        self._active = True
        self._generation += 1
        log.info("broker %d is the controller now (controller epoch %d)", self.broker_id, self.epoch)
        ChildrenWatch(self._zk, layout.BROKER_IDS, self._watch("brokers"))
        ChildrenWatch(self._zk, layout.ADMIN_CREATE_TOPICS, self._watch("create"))
        ChildrenWatch(self._zk, layout.ADMIN_DELETE_TOPICS, self._watch("delete"))

    def _resign(self) -> None:
        if self._active:
            log.info("broker %d is no longer the controller", self.broker_id)
        self._active = False
        self._generation += 1

    def _still_controller(self) -> bool:
        try:
            data, stat = self._zk.get(layout.CONTROLLER)
        except NoNodeError:
            return False
        return (layout.decode(data).get("brokerid") == self.broker_id
                and stat.ephemeralOwner == self._zk.client_id[0])

    def _bump_epoch(self) -> int:
        while True:
            try:
                data, stat = self._zk.get(layout.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self._zk.create(layout.CONTROLLER_EPOCH, b"1", makepath=True)
                    return 1
                except NodeExistsError:
                    continue
            epoch = int(data.decode() or 0) + 1
            try:
                self._zk.set(layout.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                return epoch
            except BadVersionError:
                continue

    def _live_brokers(self) -> list[int]:
        return sorted(int(b) for b in self._zk.get_children(layout.BROKER_IDS))

    # -- broker changes: leadership ---------------------------------------------------------------

    def _on_brokers_change(self) -> None:
        if not self._still_controller():
            self._resign()
            return
        live = set(self._live_brokers())
        for topic in self._zk.get_children(layout.BROKER_TOPICS):
            try:
                replicas = layout.parse_topic_assignment(self._zk.get(layout.topic_path(topic))[0])
            except NoNodeError:
                continue
            for index, replica_list in sorted(replicas.items()):
                self._elect_leader(topic, index, replica_list, live)

    def _elect_leader(self, topic: str, index: int, replicas: list[int], live: set[int]) -> None:
        path = layout.partition_state_path(topic, index)
        try:
            data, stat = self._zk.get(path)
        except NoNodeError:
            return
        state = parse_partition_state(data)
        if state is None:
            return
        if state.leader != NO_LEADER and state.leader in live:
            return
        candidates = [r for r in replicas if r in live]
        if state.leader == NO_LEADER and not candidates:
            return
        if candidates:
            leader, isr = candidates[0], [candidates[0]]
            log.info("partition %s-%d: leader %d (epoch %d)", topic, index, leader, state.leader_epoch + 1)
        else:
            # Kafka keeps the last leader in the isr of an offline partition, so it can come back clean.
            leader, isr = NO_LEADER, list(state.isr)
            log.info("partition %s-%d is offline: leader %d left (epoch %d)", topic, index, state.leader,
                     state.leader_epoch + 1)
        try:
            self._zk.set(path, layout.partition_state(leader, state.leader_epoch + 1, isr, self.epoch),
                         version=stat.version)
        except (BadVersionError, NoNodeError):
            log.info("partition %s-%d changed under the controller; it will be looked at again", topic, index)

    # -- topic creation and deletion --------------------------------------------------------------

    def _on_create_requests(self) -> None:
        for topic in sorted(self._zk.get_children(layout.ADMIN_CREATE_TOPICS)):
            if not self._still_controller():
                self._resign()
                return
            self._create_topic(topic)

    def _create_topic(self, topic: str) -> None:
        request_path = layout.create_topic_request_path(topic)
        try:
            data, _ = self._zk.get(request_path)
        except NoNodeError:
            return
        request = layout.decode(data)
        if "error_code" in request:
            return
        if self._zk.exists(layout.topic_path(topic)):
            self._refuse(request_path, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic!r} already exists")
            return
        live = self._live_brokers()
        partitions, factor = int(request["partitions"]), int(request["replication_factor"])
        if not 1 <= factor <= len(live):
            self._refuse(request_path, ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"replication factor {factor} is larger than the {len(live)} live broker(s)")
            return
        replicas = assign_replicas(live, partitions, factor, start=random.randrange(len(live)))
        config_path = layout.topic_config_path(topic)
        configs = layout.topic_config(request.get("configs", {}))
        if self._zk.exists(config_path):
            self._zk.set(config_path, configs)
        else:
            self._zk.create(config_path, configs, makepath=True)
        txn = self._zk.transaction()
        txn.create(layout.topic_path(topic), layout.topic_assignment(replicas, topic_id=uuid.uuid4().hex))
        txn.create(layout.partitions_path(topic), b"")
        for index, replica_list in replicas.items():
            txn.create(f"{layout.partitions_path(topic)}/{index}", b"")
            txn.create(layout.partition_state_path(topic, index),
                       layout.partition_state(replica_list[0], 0, [replica_list[0]], self.epoch))
        txn.delete(request_path)
        results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            log.warning("creating topic %s failed in ZooKeeper: %r", topic, failures[0])
            return
        log.info("created topic %s: %d partition(s) over brokers %s", topic, partitions, live)

    def _refuse(self, request_path: str, code: int, message: str) -> None:
        log.info("refusing %s: %s", request_path, message)
        try:
            self._zk.set(request_path, request_error(code, message))
        except NoNodeError:
            pass

    def _on_delete_requests(self) -> None:
        for topic in sorted(self._zk.get_children(layout.ADMIN_DELETE_TOPICS)):
            if not self._still_controller():
                self._resign()
                return
            self._delete_topic(topic)

    def _delete_topic(self, topic: str) -> None:
        txn = self._zk.transaction()
        partitions_path = layout.partitions_path(topic)
        try:
            indexes = self._zk.get_children(partitions_path)
        except NoNodeError:
            indexes = None
        for index in indexes or ():
            for child in self._zk.get_children(f"{partitions_path}/{index}"):
                txn.delete(f"{partitions_path}/{index}/{child}")
            txn.delete(f"{partitions_path}/{index}")
        if indexes is not None:
            txn.delete(partitions_path)
        if self._zk.exists(layout.topic_path(topic)):
            txn.delete(layout.topic_path(topic))
        if self._zk.exists(layout.topic_config_path(topic)):
            txn.delete(layout.topic_config_path(topic))
        txn.delete(layout.delete_topic_request_path(topic))
        results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            log.warning("deleting topic %s failed in ZooKeeper: %r", topic, failures[0])
            return
        log.info("deleted topic %s", topic)
