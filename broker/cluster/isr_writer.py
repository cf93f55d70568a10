"""IsrChangeWriter: stores a leader's ISR changes in ZooKeeper and tells the controller about them.

The leader rewrites its partition's state znode itself (leader, leader epoch and controller epoch as it
read them, the new ISR), conditional on the znode version it last read or wrote: if the controller (or
a newer leader) changed the state meanwhile, the write fails and the change is dropped; the newer state
arrives through the metadata cache's watch. A stored change takes effect on the partition (the ISR the
high watermark and acks=all count) only then, and a sequential znode under /isr_change_notification
tells the controller which states to read again (Kafka's ZooKeeper-mode ISR propagation).

``propose`` runs on the event loop; the ZooKeeper calls run in the loop's executor.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from broker.metrics import BrokerMetrics
from broker.partition import Partition
from pipeline.error_text import describe_error
from pipeline.zk import layout
from pipeline.zk.client import BoundedZk, ZooKeeperTimeout

log = logging.getLogger(__name__)


class IsrChangeWriter:
    """Writes ISR changes proposed by this broker's leaders (see the module docstring)."""

    def __init__(self, zk: BoundedZk, broker_id: int, loop: asyncio.AbstractEventLoop, metrics: BrokerMetrics) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self._loop = loop
        self._metrics = metrics
        self._closed = False

    def close(self) -> None:
        self._closed = True

    def propose(self, partition: Partition, isr: frozenset[int]) -> None:
        """Store ``isr`` as the partition's ISR for its current leader epoch (the partition marks a change pending)."""
        epoch, version, old = partition.leader_epoch, partition.zk_version, partition.isr
        data = layout.partition_state(self.broker_id, epoch, sorted(isr), partition.controller_epoch)
        path = layout.partition_state_path(partition.topic, partition.index)
        notice = layout.partition_list([(partition.topic, partition.index)])
        future = self._loop.run_in_executor(None, self._write, path, data, version, notice)

        def done(finished: asyncio.Future) -> None:
            partition.isr_change_pending = False
            try:
                new_version = finished.result()
            except BadVersionError:
                log.info("ISR change of %s-%d to %s not stored: its state changed in ZooKeeper (version %d is "
                         "old); the new state is read again", partition.topic, partition.index, sorted(isr), version)
                return
            except (KazooException, ZooKeeperTimeout, NoNodeError) as exc:
                log.warning("ISR change of %s-%d to %s not stored: %s", partition.topic, partition.index,
                            sorted(isr), describe_error(exc))
                return
            if self._closed or not partition.is_leader or partition.leader_epoch != epoch:
                return
            removed, added = old - isr, isr - old
            log.info("ISR of %s-%d is now %s (%s)", partition.topic, partition.index, sorted(isr),
                     ", ".join([f"{sorted(removed)} left"] * bool(removed) + [f"{sorted(added)} joined"] * bool(added)))
            if removed:
                self._metrics.isr_shrinks.inc()
            if added:
                self._metrics.isr_expands.inc()
            partition.update_isr(isr, new_version)
        future.add_done_callback(done)

    def _write(self, path: str, data: bytes, version: int, notice: bytes) -> int:
        stat = self._zk.sync("set", path, data, version=version)
        try:
            self._zk.sync("create", layout.ISR_CHANGE_PREFIX, notice, sequence=True, makepath=True)
        except (KazooException, ZooKeeperTimeout) as exc:
            log.warning("could not notify the controller of the ISR change at %s: %s", path, describe_error(exc))
        return stat.version
