"""Partition: one topic-partition hosted by this broker, as its leader or as a follower (Kafka's Partition).

As leader it tracks every follower's log end offset and when it last caught up, from the followers'
Fetch requests; keeps the in-sync replica set (ISR) and the high watermark, the smallest log end offset
in the ISR, below which consumers read; and holds the acks=all produces waiting for the high watermark
to pass their batches (Kafka's delayed produce). ISR changes are proposed to ``propose_isr`` (ZooKeeper
in cluster mode, where the write is conditional on the state's znode version) and take effect when the
write succeeded: a follower counts for the high watermark only once the ISR holding it is stored.

Everything here runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from broker.log.log import Log
from broker.metrics import TopicStats
from pipeline.protocol.errors import ErrorCode

UNKNOWN_OFFSET = -1


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FollowerState:
    """What the leader knows of one follower: its log end offset and when it was last caught up."""

    __slots__ = ("log_end_offset", "last_caught_up_ms", "last_fetch_ms", "last_fetch_leader_end")

    def __init__(self, now_ms: int, in_sync: bool) -> None:
        self.log_end_offset = UNKNOWN_OFFSET
        # A follower in the ISR gets a full lag window from the moment this broker became leader.
        self.last_caught_up_ms = now_ms if in_sync else 0
        self.last_fetch_ms = 0
        self.last_fetch_leader_end = UNKNOWN_OFFSET


class Partition:
    """One topic-partition this broker hosts: its log, role, leader epoch, ISR and waiting requests."""

    __slots__ = ("topic", "index", "log", "leader_epoch", "stats", "broker_id", "is_leader", "leader_id",
                 "replicas", "isr", "zk_version", "controller_epoch", "followers", "isr_change_pending",
                 "_waiters", "_hw_waiters", "_acks_waiters")

    def __init__(self, topic: str, index: int, log: Log, leader_epoch: int = -1,
                 stats: TopicStats | None = None, broker_id: int = -1) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.stats = stats if stats is not None else TopicStats()
        self.leader_epoch = leader_epoch
        self.broker_id = broker_id
        self.is_leader = False
        self.leader_id = -1
        self.replicas: tuple[int, ...] = (broker_id,)
        self.isr: frozenset[int] = frozenset((broker_id,))
        # The version of the state znode this broker last read or wrote: its ISR writes are conditional on it.
        self.zk_version = -1
        self.controller_epoch = 0
        self.followers: dict[int, FollowerState] = {}
        self.isr_change_pending = False
        # Long-polling fetches: followers' (any append gives them something to read) and consumers' (they read
        # below the high watermark only, so an append that leaves it where it was gives them nothing).
        self._waiters: list[asyncio.Future] = []
        self._hw_waiters: list[asyncio.Future] = []
        # (offset the high watermark must reach, future) of acks=all produces.
        self._acks_waiters: list[tuple[int, asyncio.Future]] = []

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return f"Partition({self.topic}-{self.index}, {role}, epoch {self.leader_epoch}, isr {sorted(self.isr)})"

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    @property
    def under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.replicas)

    @property
    def under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.min_insync_replicas

    # -- role changes ----------------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...], zk_version: int = -1,
                      controller_epoch: int = 0) -> None:
        """Lead from now on with this epoch and ISR: a new epoch starts at the log end offset."""
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        self.is_leader = True
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = frozenset(isr) | {self.broker_id}
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        self.isr_change_pending = False
        if new_epoch:
            now = monotonic_ms()
            self.followers = {r: FollowerState(now, r in self.isr) for r in replicas if r != self.broker_id}
            if leader_epoch >= 0:
                self.log.assign_leader_epoch(leader_epoch)
        else:
            self.update_replicas(replicas)
        self.maybe_increment_high_watermark()

    def update_replicas(self, replicas: tuple[int, ...]) -> None:
        """Take a new replica list in the same leader epoch (a reassignment): new followers are tracked from now."""
        self.replicas = replicas
        if self.is_leader:
            now = monotonic_ms()
            for replica in replicas:
                if replica != self.broker_id and replica not in self.followers:
                    self.followers[replica] = FollowerState(now, replica in self.isr)

    def update_isr(self, isr: tuple[int, ...] | frozenset[int], zk_version: int) -> None:
        """Take an ISR stored in ZooKeeper (by this leader or the controller) for the current epoch."""
        self.isr = frozenset(isr) | {self.broker_id}
        self.zk_version = zk_version
        self.maybe_increment_high_watermark()

    def become_follower(self, leader_id: int, leader_epoch: int, replicas: tuple[int, ...]) -> None:
        """Stop leading (if leading): waiting fetches return, waiting produces fail with NOT_LEADER_OR_FOLLOWER."""
        self.is_leader = False
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.followers = {}
        self.isr_change_pending = False
        self.wake_waiters()
        self.fail_acks_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # -- the leader's view of its followers ------------------------------------------------------

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int) -> int | None:
        """Record a follower's Fetch at ``fetch_offset`` (its log end offset). Returns the replica to add to
        the ISR when it caught up and is not in it, else None."""
        follower = self.followers.get(replica_id)
        leader_end = self.log.log_end_offset
        if follower is None or fetch_offset > leader_end:
            return None
        follower.log_end_offset = fetch_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.last_fetch_leader_end >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_end = leader_end
        follower.last_fetch_ms = now_ms
        self.maybe_increment_high_watermark()
        if replica_id not in self.isr and fetch_offset >= self.high_watermark and \
                fetch_offset >= self._current_epoch_start():
            return replica_id
        return None

    def _current_epoch_start(self) -> int:
        """Where this leader's epoch starts in the log: a follower joins the ISR only past it (Kafka's rule)."""
        entries = self.log.leader_epoch_cache.entries()
        for epoch, start in reversed(entries):
            if epoch == self.leader_epoch:
                return start
        return 0

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> set[int]:
        """ISR followers that have not caught up for ``max_lag_ms``."""
        return {r for r in self.isr if r != self.broker_id
                and (f := self.followers.get(r)) is not None and now_ms - f.last_caught_up_ms > max_lag_ms}

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end offset in the ISR if that is higher; then wake
        the acks=all produces and consumer fetches it lets through. True if it moved."""
        if not self.is_leader:
            return False
        log = self.log
        new = log.log_end_offset
        if len(self.isr) > 1:
            for replica in self.isr:
                if replica == self.broker_id:
                    continue
                follower = self.followers.get(replica)
                if follower is None or follower.log_end_offset == UNKNOWN_OFFSET:
                    return False
                if follower.log_end_offset < new:
                    new = follower.log_end_offset
        if new <= log.high_watermark:
            return False
        log.update_high_watermark(new)
        if self._acks_waiters:
            self._complete_acks_waiters()
        self.wake_waiters()
        return True

    # -- acks=all --------------------------------------------------------------------------------

    def acks_error(self) -> int:
        """NOT_ENOUGH_REPLICAS when the ISR is below min.insync.replicas (checked before appending)."""
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def wait_for_high_watermark(self, required_offset: int) -> asyncio.Future:
        """A future that resolves to the error code of an acks=all produce whose last offset is
        ``required_offset - 1``: NONE once the high watermark reaches it with the ISR at min.insync.replicas,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below, NOT_LEADER_OR_FOLLOWER if leadership moves."""
        future = asyncio.get_running_loop().create_future()
        if not self.is_leader:
            future.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif self.high_watermark >= required_offset:
            future.set_result(self._acks_outcome())
        else:
            self._acks_waiters.append((required_offset, future))
        return future

    def _acks_outcome(self) -> int:
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _complete_acks_waiters(self) -> None:
        if not self._acks_waiters:
            return
        hw = self.log.high_watermark
        outcome = self._acks_outcome()
        waiting = []
        for required, future in self._acks_waiters:
            if future.done():
                continue
            if required <= hw:
                future.set_result(outcome)
            else:
                waiting.append((required, future))
        self._acks_waiters = waiting

    def fail_acks_waiters(self, error_code: int) -> None:
        waiters, self._acks_waiters = self._acks_waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_result(error_code)

    # -- fetches waiting for data ----------------------------------------------------------------

    def add_waiter(self, future: asyncio.Future, *, follower: bool = True) -> None:
        """Wake ``future`` (set None) at the next append (a follower's fetch) or the next move of the high
        watermark (a consumer's), or when this replica stops leading."""
        (self._waiters if follower else self._hw_waiters).append(future)

    def remove_waiter(self, future: asyncio.Future) -> None:
        for waiters in (self._waiters, self._hw_waiters):
            try:
                waiters.remove(future)
            except ValueError:
                pass

    def wake_waiters(self) -> None:
        """Wake every waiting fetch (the high watermark moved, or the role changed)."""
        if self._waiters:
            self.wake_follower_waiters()
        if self._hw_waiters:
            waiters, self._hw_waiters = self._hw_waiters, []
            _wake(waiters)

    def wake_follower_waiters(self) -> None:
        """Wake the followers' waiting fetches (an append that left the high watermark where it was)."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            _wake(waiters)


def _wake(waiters: list[asyncio.Future]) -> None:
    for future in waiters:
        if not future.done():
            future.set_result(None)


IsrProposer = Callable[[Partition, frozenset[int]], None]
