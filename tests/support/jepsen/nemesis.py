"""The nemesis: bounces the current leader of a partition, cleanly (SIGTERM) or hard (SIGKILL), and restarts it.

The leader comes from the partition's state in ZooKeeper. After the kill, a probe writer sends one value at
a time to the partition (acks=all) until one is acknowledged: that is when the partition serves again, and
the time from the kill to it is the failover time. When the leader was the only in-sync replica left
(replication factor 1), nothing else can take over, so it is restarted at once; otherwise after the
failover. A bounce ends when every replica is back in the ISR, so the next one starts from a whole cluster.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

from tests.support.cluster import BrokerCluster
from tests.support.polling import wait_until

from .clients import ConfluentWriter

NO_LEADER = -1


@dataclass(frozen=True)
class Bounce:
    """One bounce: which partition's leader was stopped, how, and how long until the partition served again."""

    partition: int
    broker: int
    hard: bool
    failover_s: float
    leader_after: int


class Nemesis:
    """Bounces leaders of ``topic``'s partitions in ``cluster``; ``probe`` writes the probe values."""

    def __init__(self, cluster: BrokerCluster, topic: str, probe: ConfluentWriter, *,
                 serve_timeout_s: float = 90.0, in_sync_timeout_s: float = 90.0) -> None:
        self.cluster = cluster
        self.topic = topic
        self.probe = probe
        self.serve_timeout_s = serve_timeout_s
        self.in_sync_timeout_s = in_sync_timeout_s
        self._numbers = itertools.count()

    def state(self, partition: int) -> dict:
        return self.cluster.partition_state(self.topic, partition)

    def leader(self, partition: int, timeout_s: float = 30.0) -> int:
        """The partition's leader as ZooKeeper has it, once it has a live one."""
        def led() -> int | None:
            leader = self.state(partition)["leader"]
            running = leader in self.cluster.brokers and self.cluster.brokers[leader].is_running
            return leader if leader != NO_LEADER and running else None
        return wait_until(led, timeout_s, interval=0.02, message=f"{self.topic}-{partition} having a live leader")

    def bounce(self, partition: int, hard: bool) -> Bounce:
        leader = self.leader(partition)
        others_in_sync = [b for b in self.state(partition)["isr"] if b != leader]
        broker = self.cluster.brokers[leader]
        killed_at = time.monotonic()
        if hard:
            broker.kill()
        else:
            broker.stop()
        if not others_in_sync:
            broker.start()
        failover_s = self.served_at(partition) - killed_at
        if not broker.is_running:
            broker.start()
        self.wait_in_sync(partition)
        return Bounce(partition, leader, hard, failover_s, self.state(partition)["leader"])

    def served_at(self, partition: int) -> float:
        """Send probe values to the partition until one is acknowledged; return when that happened."""
        acknowledged = threading.Event()
        self.probe.send(partition, f"probe-{next(self._numbers)}", on_ack=acknowledged.set)
        deadline = time.monotonic() + self.serve_timeout_s
        while not acknowledged.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}-{partition} not serving {self.serve_timeout_s:.0f}s after the bounce")
            self.probe.poll(0.005)
        return time.monotonic()

    def wait_in_sync(self, partition: int) -> None:
        """Until every replica of the partition is registered and in its ISR, under a live leader."""
        replicas = set(self.cluster.assignment(self.topic)[partition])

        def whole() -> bool:
            state = self.state(partition)
            return (state["leader"] != NO_LEADER and set(state["isr"]) >= replicas
                    and self.cluster.registered() >= replicas)
        wait_until(whole, self.in_sync_timeout_s, interval=0.05,
                   message=lambda: f"every replica of {self.topic}-{partition} in sync again: {self.state(partition)}")
