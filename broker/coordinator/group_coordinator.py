"""GroupCoordinator: the broker side of Kafka's classic consumer-group protocol, on the event loop.

Members join (JoinGroup), the coordinator forms a generation when every known member has rejoined or the
rebalance timeout passed, the leader's assignment is relayed to every member (SyncGroup), members prove they
are alive (Heartbeat) and leave (LeaveGroup or their session timeout). Offsets are committed and fetched
through a GroupStore (ZooKeeper in a cluster, the log dir standalone); offsets committed inside a transaction
(TxnOffsetCommit) are stored pending and become committed, or are dropped, when the transaction's marker for
the group's ``__consumer_offsets`` partition arrives (Kafka's handleTxnCommitOffsets and handleTxnCompletion).
Timers are event-loop callbacks: each member's session expiry and each group's join deadline (the rebalance
timeout, or the initial delay of an empty group's first rebalance, extended while members keep arriving, as
Kafka's InitialDelayedJoin).

The handlers take the request's fields and return response bodies in the protocol codec's dicts, so
KafkaApis only adapts versions. ``owns(group_id)`` says whether this broker coordinates a group; a group
that moved away is unloaded (``unload_moved_groups``) and its waiting requests answered NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from broker.coordinator.coordinator_metrics import GroupCoordinatorMetrics
from broker.coordinator.coordinator_placement import partition_for
from broker.coordinator.group_metadata import GroupMetadata, GroupState, MemberMetadata
from broker.coordinator.group_store import (
    NO_VERSION,
    CommittedOffset,
    GroupFenced,
    GroupStore,
    GroupStoreError,
    StaleProducerEpoch,
    TopicPartition,
)
from pipeline.error_text import describe_error
from pipeline.printable import printable
from pipeline.protocol.errors import ErrorCode
from pipeline.zk.layout import now_ms

log = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_OFFSET = -1
# How long a member that joined for the first time may wait for its generation before it is dropped
# (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class GroupConfig:
    """The coordinator's settings (Kafka's broker properties of the same names)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 10080 * 60_000
    offset_metadata_max_bytes: int = 4096
    commit_timeout_ms: int = 5000
    offsets_topic_num_partitions: int = 50

    @classmethod
    def from_config(cls, config: Any) -> GroupConfig:
        return cls(config["group.min.session.timeout.ms"], config["group.max.session.timeout.ms"],
                   config["group.initial.rebalance.delay.ms"], config["group.max.size"],
                   config["offsets.retention.minutes"] * 60_000, config["offset.metadata.max.bytes"],
                   config["offsets.commit.timeout.ms"], config["offsets.topic.num.partitions"])


class _NotHere(Exception):
    """The group cannot be served here now; ``code`` says why (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class GroupCoordinator:
    """The groups this broker coordinates (see the module docstring)."""

    def __init__(self, store: GroupStore, config: GroupConfig, owns: Callable[[str], bool] = lambda group: True,
                 metrics: GroupCoordinatorMetrics | None = None, clock_ms: Callable[[], int] = now_ms) -> None:
        self.store = store
        self.config = config
        self.owns = owns
        self.metrics = metrics if metrics is not None else GroupCoordinatorMetrics()
        self.metrics.groups = self.group_states
        self._now = clock_ms
        self._groups: dict[str, GroupMetadata] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self._join_timers: dict[str, asyncio.TimerHandle] = {}
        # Groups in their initial delayed rebalance, which waits out its delay even when everyone joined.
        self._initial_delays: set[str] = set()
        self._store_locks: dict[str, asyncio.Lock] = {}
        self.active = True

    # -- groups ----------------------------------------------------------------------------------

    def group_states(self) -> list[GroupState]:
        """The state of every loaded group (for the metrics)."""
        return [g.state for g in list(self._groups.values())]

    def _check_owner(self, group_id: str) -> None:
        if not self.active:
            raise _NotHere(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not self.owns(group_id):
            raise _NotHere(ErrorCode.NOT_COORDINATOR)

    async def _group(self, group_id: str, create: bool) -> GroupMetadata | None:
        """The loaded group, loading it from the store on first use; None when unknown and not ``create``d."""
        self._check_owner(group_id)
        group = self._groups.get(group_id)
        if group is None:
            group = await self._load(group_id)
        if group is None and create:
            group = self._groups[group_id] = GroupMetadata(group_id, state_timestamp_ms=self._now())
        return group

    async def _load(self, group_id: str) -> GroupMetadata | None:
        pending = self._loading.get(group_id)
        if pending is None:
            pending = self._loading[group_id] = asyncio.ensure_future(self.store.load(group_id))
            pending.add_done_callback(lambda _: self._loading.pop(group_id, None))
        try:
            record, version = await asyncio.shield(pending)
        except GroupStoreError as exc:
            log.warning("group %s: could not load it: %s", printable(group_id), exc)
            raise _NotHere(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None
        self._check_owner(group_id)
        group = self._groups.get(group_id)
        if group is not None:  # loaded by a concurrent request meanwhile
            return group
        if record is None:
            if version == NO_VERSION:
                return None
            group = GroupMetadata(group_id, state_timestamp_ms=self._now(), store_version=version)
        else:
            group = GroupMetadata.from_record(group_id, record, version, self._now())
        self._groups[group_id] = group
        for member in group.members.values():
            self._schedule_expiry(group, member, member.session_timeout_ms)
        log.info("group %s loaded: %s, generation %d, %d member(s)", printable(group_id), group.state.value,
                 group.generation_id, len(group.members))
        return group

    def unload_moved_groups(self) -> None:
        """Forget the groups this broker no longer coordinates, answering their waiting requests NOT_COORDINATOR."""
        for group_id in [g for g in self._groups if not self.active or not self.owns(g)]:
            self._unload(group_id, ErrorCode.NOT_COORDINATOR)

    def _unload(self, group_id: str, code: int) -> None:
        group = self._groups.pop(group_id, None)
        if group is None:
            return
        self._cancel_join_timer(group_id)
        for member in group.members.values():
            self._cancel_expiry(member)
            if member.awaiting_join is not None:
                self._answer_join(member, _join_error(code, member.member_id))
            if member.awaiting_sync is not None:
                self._answer_sync(member, code)
        log.info("group %s unloaded (%s)", printable(group_id), ErrorCode(code).name)

    def shutdown(self) -> None:
        """Stop coordinating: waiting requests are answered NOT_COORDINATOR, so members find the next coordinator."""
        self.active = False
        self.unload_moved_groups()

    # -- JoinGroup -------------------------------------------------------------------------------

    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                         client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> dict:
        if not group_id:
            return _join_error(ErrorCode.INVALID_GROUP_ID, member_id)
        config = self.config
        if not config.min_session_timeout_ms <= session_timeout_ms <= config.max_session_timeout_ms:
            return _join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        try:
            group = await self._group(group_id, create=True)
        except _NotHere as exc:
            return _join_error(exc.code, member_id)
        assert group is not None
        if group.is_in(GroupState.DEAD):
            return _join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports(protocol_type, protocols):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id == UNKNOWN_MEMBER_ID:
            if len(group.members) + len(group.pending_members) >= config.max_size:
                return _join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
            new_id = f"{client_id}-{uuid.uuid4()}"
            if group_instance_id is not None:
                old_id = group.static_member_id(group_instance_id)
                if old_id is not None:
                    return await self._rejoin_static_member(group, old_id, new_id, group_instance_id, protocols)
            elif require_known_member_id:
                group.pending_members.add(new_id)
                self._schedule_pending_expiry(group, new_id, session_timeout_ms)
                return _join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id)
            member = MemberMetadata(new_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                    session_timeout_ms, protocol_type, protocols)
            return await self._add_member_and_rebalance(group, member)
        if member_id in group.pending_members:
            member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                    session_timeout_ms, protocol_type, protocols)
            return await self._add_member_and_rebalance(group, member)
        if self._fenced(group, member_id, group_instance_id):
            return _join_error(ErrorCode.FENCED_INSTANCE_ID, member_id)
        member = group.members.get(member_id)
        if member is None:
            return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_timeout_ms, session_timeout_ms
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return await self._update_member_and_rebalance(group, member, protocols)
        if group.is_in(GroupState.COMPLETING_REBALANCE) or group.is_in(GroupState.STABLE):
            if member.matches(protocols) and not (group.is_in(GroupState.STABLE) and group.is_leader(member_id)):
                # A rejoin that changes nothing (e.g. a lost JoinGroup answer): the current generation again.
                self._schedule_expiry(group, member, member.session_timeout_ms)
                return self._join_answer(group, member)
            return await self._update_member_and_rebalance(group, member, protocols)
        return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    async def _add_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata) -> dict:
        member.is_new = True
        future = member.awaiting_join = asyncio.get_running_loop().create_future()
        group.add(member)
        if group.is_in(GroupState.PREPARING_REBALANCE) and self.config.initial_rebalance_delay_ms:
            group.new_member_added = True
        # A new member's session starts once it is in a generation; until then it may wait this long.
        self._schedule_expiry(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} joined")
        self._maybe_complete_join(group)
        return await future

    async def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                           protocols: list[tuple[str, bytes]]) -> dict:
        member.protocols = protocols
        if member.awaiting_join is not None:
            # A second JoinGroup from the same member replaces the first, which is told to rejoin.
            self._answer_join(member, _join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        future = member.awaiting_join = asyncio.get_running_loop().create_future()
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")
        self._maybe_complete_join(group)
        return await future

    async def _rejoin_static_member(self, group: GroupMetadata, old_id: str, new_id: str, instance_id: str,
                                    protocols: list[tuple[str, bytes]]) -> dict:
        """A static member back under a new member id: it takes the old id's place (fencing it) and, when the
        group is stable and its subscription unchanged, its old assignment, without a rebalance."""
        old = group.members[old_id]
        if old.awaiting_join is not None:
            self._answer_join(old, _join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
        if old.awaiting_sync is not None:
            self._answer_sync(old, ErrorCode.FENCED_INSTANCE_ID)
        self._cancel_expiry(old)
        was_leader = group.is_leader(old_id)
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.protocols = protocols
        # A new process sends new metadata bytes (user data); only a change of the group's protocol rebalances.
        if group.is_in(GroupState.STABLE) and group.select_protocol() == group.protocol_name:
            try:
                await self._store_group(group)
            except _NotHere as exc:
                return _join_error(exc.code, new_id)
            self._schedule_expiry(group, member, member.session_timeout_ms)
            answer = self._join_answer(group, member)
            if was_leader:
                # As Kafka does: the returning leader is told the old id leads, so it does not assign again
                # (the group's assignment stands); it leads under its new id from the next rebalance on.
                answer.update(leader=old_id, members=[])
            return answer
        return await self._update_member_and_rebalance(group, member, protocols)

    def _join_answer(self, group: GroupMetadata, member: MemberMetadata) -> dict:
        leader = group.is_leader(member.member_id)
        members = [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in group.leader_view()] \
            if leader else []
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "generation_id": group.generation_id,
                "protocol_name": group.protocol_name or "", "leader": group.leader_id or "", "member_id": member.member_id,
                "members": members}

    # -- rebalancing -----------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.awaiting_sync is not None:
                    self._answer_sync(member, ErrorCode.REBALANCE_IN_PROGRESS)
        initial = group.is_in(GroupState.EMPTY) and self.config.initial_rebalance_delay_ms > 0
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now())
        self.metrics.rebalances += 1
        rebalance_ms = group.max_rebalance_timeout_ms()
        log.info("group %s: preparing to rebalance generation %d (%s)", printable(group.group_id), group.generation_id,
                 printable(reason))
        if initial:
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_ms)
            group.new_member_added = False
            self._schedule_join(group, delay, initial_remaining_ms=rebalance_ms - delay)
        else:
            self._schedule_join(group, rebalance_ms)

    def _schedule_join(self, group: GroupMetadata, delay_ms: int, initial_remaining_ms: int | None = None) -> None:
        self._cancel_join_timer(group.group_id)
        loop = asyncio.get_running_loop()
        self._join_timers[group.group_id] = loop.call_later(
            delay_ms / 1000, self._on_join_deadline, group, initial_remaining_ms)
        if initial_remaining_ms is not None:
            self._initial_delays.add(group.group_id)

    def _cancel_join_timer(self, group_id: str) -> None:
        self._initial_delays.discard(group_id)
        timer = self._join_timers.pop(group_id, None)
        if timer is not None:
            timer.cancel()

    def _on_join_deadline(self, group: GroupMetadata, initial_remaining_ms: int | None) -> None:
        self._join_timers.pop(group.group_id, None)
        self._initial_delays.discard(group.group_id)
        if self._groups.get(group.group_id) is not group or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if initial_remaining_ms is not None and group.new_member_added and initial_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, initial_remaining_ms)
            self._schedule_join(group, delay, initial_remaining_ms - delay)
            return
        self._complete_join(group)

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        """Form the generation as soon as every member rejoined (not during an empty group's initial delay)."""
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.all_members_joined() \
                and group.group_id not in self._initial_delays:
            self._cancel_join_timer(group.group_id)
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined():
            if member.group_instance_id is None:
                log.info("group %s: member %s did not rejoin in time; removed", printable(group.group_id),
                         printable(member.member_id))
                self._cancel_expiry(member)
                group.remove(member.member_id)
        rejoined = [m for m in group.members.values() if m.awaiting_join is not None]
        if group.members and not rejoined:
            # Only static members that have not rejoined: wait for them (or their sessions) once more.
            self._schedule_join(group, group.max_rebalance_timeout_ms())
            return
        leader = group.members.get(group.leader_id) if group.leader_id is not None else None
        if rejoined and (leader is None or leader.awaiting_join is None):
            group.leader_id = rejoined[0].member_id  # the leader must get the members in its JoinGroup answer
        group.init_next_generation(self._now())
        if group.is_in(GroupState.EMPTY):
            log.info("group %s: generation %d is empty", printable(group.group_id), group.generation_id)
            asyncio.ensure_future(self._store_quietly(group))
            return
        log.info("group %s: generation %d formed with %d member(s), protocol %s, leader %s", printable(group.group_id),
                 group.generation_id, len(group.members), printable(group.protocol_name), printable(group.leader_id))
        for member in group.members.values():
            if member.awaiting_join is not None:
                self._answer_join(member, self._join_answer(group, member))
            self._schedule_expiry(group, member, member.session_timeout_ms)

    def _remove_member_and_update(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        self._cancel_expiry(member)
        if member.awaiting_join is not None:
            self._answer_join(member, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        if member.awaiting_sync is not None:
            self._answer_sync(member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        log.info("group %s: member %s removed (%s)", printable(group.group_id), printable(member.member_id),
                 printable(reason))
        if group.is_in(GroupState.STABLE) or group.is_in(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left: {reason}")
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # -- sessions --------------------------------------------------------------------------------

    def _schedule_expiry(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        self._cancel_expiry(member)
        member.heartbeat_timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._on_session_expired, group, member)

    @staticmethod
    def _cancel_expiry(member: MemberMetadata) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _on_session_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if self._groups.get(group.group_id) is not group or group.members.get(member.member_id) is not member:
            return
        if (member.awaiting_join is not None and not member.is_new) or member.awaiting_sync is not None:
            # Waiting on the group, not gone: the rebalance's own deadline decides.
            self._schedule_expiry(group, member, member.session_timeout_ms)
            return
        self.metrics.expired_members += 1
        self._remove_member_and_update(group, member, "session timed out")

    def _schedule_pending_expiry(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                if group.is_in(GroupState.PREPARING_REBALANCE):
                    self._maybe_complete_join(group)
        asyncio.get_running_loop().call_later(timeout_ms / 1000, expire)

    @staticmethod
    def _answer_join(member: MemberMetadata, body: dict) -> None:
        _settle(member.awaiting_join, body)
        member.awaiting_join = None

    @staticmethod
    def _answer_sync(member: MemberMetadata, code: int, assignment: bytes = b"") -> None:
        _settle(member.awaiting_sync, _sync_answer(code, assignment))
        member.awaiting_sync = None

    @staticmethod
    def _fenced(group: GroupMetadata, member_id: str, group_instance_id: str | None) -> bool:
        """A static member's request under a member id that is no longer the instance's."""
        return group_instance_id is not None and group.static_member_id(group_instance_id) not in (None, member_id)

    # -- SyncGroup -------------------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         assignments: dict[str, bytes]) -> dict:
        try:
            group = await self._group(group_id, create=False)
        except _NotHere as exc:
            return _sync_answer(exc.code)
        if group is not None and self._fenced(group, member_id, group_instance_id):
            return _sync_answer(ErrorCode.FENCED_INSTANCE_ID)
        if group is None or not group.has(member_id):
            return _sync_answer(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return _sync_answer(ErrorCode.ILLEGAL_GENERATION)
        member = group.members[member_id]
        if group.is_in(GroupState.STABLE):
            self._schedule_expiry(group, member, member.session_timeout_ms)
            return _sync_answer(ErrorCode.NONE, member.assignment)
        if not group.is_in(GroupState.COMPLETING_REBALANCE):
            return _sync_answer(ErrorCode.REBALANCE_IN_PROGRESS if group.is_in(GroupState.PREPARING_REBALANCE)
                                else ErrorCode.UNKNOWN_MEMBER_ID)
        if member.awaiting_sync is not None:
            self._answer_sync(member, ErrorCode.REBALANCE_IN_PROGRESS)
        future = member.awaiting_sync = asyncio.get_running_loop().create_future()
        self._schedule_expiry(group, member, member.session_timeout_ms)
        if group.is_leader(member_id):
            asyncio.ensure_future(self._complete_sync(group, generation_id, assignments))
        return await future

    async def _complete_sync(self, group: GroupMetadata, generation_id: int, assignments: dict[str, bytes]) -> None:
        """Store the leader's assignment, then hand every member its part and make the group Stable."""
        for member_id, member in group.members.items():
            member.assignment = assignments.get(member_id, b"")
        try:
            await self._store_group(group)
            code = ErrorCode.NONE
        except _NotHere as exc:
            code = exc.code
        if self._groups.get(group.group_id) is not group or group.generation_id != generation_id \
                or not group.is_in(GroupState.COMPLETING_REBALANCE):
            return
        if code != ErrorCode.NONE:
            for member in group.members.values():
                member.assignment = b""
                if member.awaiting_sync is not None:
                    self._answer_sync(member, code)
            self._prepare_rebalance(group, f"storing the assignment failed ({ErrorCode(code).name})")
            return
        group.transition_to(GroupState.STABLE, self._now())
        log.info("group %s: generation %d is stable", printable(group.group_id), generation_id)
        for member in group.members.values():
            if member.awaiting_sync is not None:
                self._answer_sync(member, ErrorCode.NONE, member.assignment)

    # -- Heartbeat, LeaveGroup -------------------------------------------------------------------

    async def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        try:
            group = await self._group(group_id, create=False)
        except _NotHere as exc:
            return exc.code
        if group is not None and self._fenced(group, member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if group is None or group.is_in(GroupState.EMPTY) or not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member = group.members[member_id]
        self._schedule_expiry(group, member, member.session_timeout_ms)
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_in(GroupState.PREPARING_REBALANCE) else ErrorCode.NONE

    async def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[dict]]:
        """Remove each (member id, instance id); the group's error and each member's."""
        try:
            group = await self._group(group_id, create=False)
        except _NotHere as exc:
            return exc.code, []
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, [
                {"member_id": m, "group_instance_id": i, "error_code": ErrorCode.UNKNOWN_MEMBER_ID} for m, i in leaving]
        results = []
        for member_id, instance_id in leaving:
            code = ErrorCode.NONE
            if instance_id is not None:
                current = group.static_member_id(instance_id)
                if current is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id != UNKNOWN_MEMBER_ID and member_id != current:
                    code = ErrorCode.FENCED_INSTANCE_ID
                else:
                    self._remove_member_and_update(group, group.members[current], "left the group")
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                if group.is_in(GroupState.PREPARING_REBALANCE):
                    self._maybe_complete_join(group)
            elif not group.has(member_id):
                code = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                self._remove_member_and_update(group, group.members[member_id], "left the group")
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": code})
        return ErrorCode.NONE, results

    # -- offsets ---------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                             offsets: dict[TopicPartition, tuple[int, str]], retention_ms: int | None = None,
                             commit_timestamp_ms: int | None = None) -> dict[TopicPartition, int]:
        """Commit (offset, metadata) per partition; the error code of each partition."""
        def every(code: int) -> dict[TopicPartition, int]:
            return {tp: code for tp in offsets}
        group = await self._committing_group(group_id, member_id, group_instance_id)
        if isinstance(group, int):
            return every(group)
        if not (generation_id < 0 and group.is_in(GroupState.EMPTY)):
            if group.is_in(GroupState.COMPLETING_REBALANCE):
                return every(ErrorCode.REBALANCE_IN_PROGRESS)
            if not group.has(member_id):
                return every(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return every(ErrorCode.ILLEGAL_GENERATION)
            member = group.members[member_id]
            self._schedule_expiry(group, member, member.session_timeout_ms)
        now = self._now()
        committed_at = commit_timestamp_ms if commit_timestamp_ms is not None and commit_timestamp_ms >= 0 else now
        expire = committed_at + retention_ms if retention_ms is not None and retention_ms >= 0 else None
        results = every(ErrorCode.NONE)
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for tp, (offset, metadata) in offsets.items():
            if metadata is not None and len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = CommittedOffset(offset, metadata or "", committed_at, expire)
        if accepted:
            code = await self._write_offsets(group, lambda version: self.store.commit_offsets(
                group.group_id, accepted, version), "committing offsets")
            if code != ErrorCode.NONE:
                results.update({tp: code for tp in accepted})
            else:
                self.metrics.offset_commits += len(accepted)
        return results

    async def _committing_group(self, group_id: str, member_id: str,
                                group_instance_id: str | None) -> GroupMetadata | int:
        """The group an offset commit goes to (created when unknown), or the error code refusing the commit."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        try:
            group = await self._group(group_id, create=True)
        except _NotHere as exc:
            return exc.code
        assert group is not None
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self._fenced(group, member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        return group

    async def _write_offsets(self, group: GroupMetadata, write: Callable[[int], Awaitable[Any]], what: str) -> int:
        """Run ``write(version of the group's record)`` (stored first if it never was); an error code."""
        try:
            if group.store_version == NO_VERSION:
                await self._store_group(group)
            for _ in range(3):
                version = group.store_version
                try:
                    await asyncio.wait_for(write(version), self.config.commit_timeout_ms / 1000)
                    return ErrorCode.NONE
                except GroupFenced:
                    if group.store_version == version:  # not our own record write racing this commit
                        raise
            raise GroupFenced(f"group {printable(group.group_id)}'s record keeps changing")
        except _NotHere as exc:
            return exc.code
        except GroupFenced as exc:
            log.warning("%s; handing the group over", exc)
            self._unload(group.group_id, ErrorCode.NOT_COORDINATOR)
            return ErrorCode.NOT_COORDINATOR
        except (GroupStoreError, asyncio.TimeoutError) as exc:
            log.warning("group %s: %s failed: %s", printable(group.group_id), what, describe_error(exc))
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    # -- transactional offsets -------------------------------------------------------------------

    def offsets_partition(self, group_id: str) -> int:
        """The group's ``__consumer_offsets`` partition: its transactional commits complete with that one's marker."""
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                                 member_id: str, group_instance_id: str | None,
                                 offsets: dict[TopicPartition, tuple[int, str]]) -> dict[TopicPartition, int]:
        """Store offsets committed in a producer's transaction as pending (Kafka's handleTxnCommitOffsets); the
        error code of each partition. A group with members checks the member and generation when given (v3); a
        group this broker does not run members for takes generation -1."""
        def every(code: int) -> dict[TopicPartition, int]:
            return {tp: code for tp in offsets}
        group = await self._committing_group(group_id, member_id, group_instance_id)
        if isinstance(group, int):
            return every(group)
        if member_id != UNKNOWN_MEMBER_ID and not group.has(member_id):
            return every(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id >= 0 and generation_id != group.generation_id:
            return every(ErrorCode.ILLEGAL_GENERATION)
        now = self._now()
        results = every(ErrorCode.NONE)
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for tp, (offset, metadata) in offsets.items():
            if metadata is not None and len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = CommittedOffset(offset, metadata or "", now)
        if not accepted:
            return results
        partition_index = self.offsets_partition(group_id)
        try:
            code = await self._write_offsets(group, lambda version: self.store.add_pending(
                group_id, producer_id, producer_epoch, partition_index, accepted, version),
                "storing transactional offsets")
        except StaleProducerEpoch as exc:
            log.info("group %s: %s", printable(group_id), exc)
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        results.update({tp: code for tp in accepted})
        return results

    async def complete_txn_offsets(self, producer_id: int, producer_epoch: int, committed: bool,
                                   partition_index: int) -> int:
        """A transaction marker for ``__consumer_offsets`` partition ``partition_index``: commit or drop the
        producer's pending offsets in every group of that partition (Kafka's handleTxnCompletion); an error code.
        A retried marker finds nothing pending and answers NONE. NOT_LEADER_OR_FOLLOWER (a group with pending
        offsets of the producer is coordinated elsewhere, or this broker stopped coordinating) and REQUEST_TIMED_OUT
        (the store failed) ask the transaction coordinator to retry, as Kafka's marker channel does for those."""
        if not self.active:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            groups = await self.store.pending_groups(
                producer_id, lambda group_id: self.offsets_partition(group_id) == partition_index)
        except GroupStoreError as exc:
            log.warning("transaction marker of producer %d: finding its groups failed: %s", producer_id, exc)
            return ErrorCode.REQUEST_TIMED_OUT
        answer = ErrorCode.NONE
        for group_id in groups:
            code = await self._complete_group_txn(group_id, producer_id, committed)
            if code != ErrorCode.NONE:
                answer = code
        return answer

    async def _complete_group_txn(self, group_id: str, producer_id: int, committed: bool) -> int:
        try:
            group = await self._group(group_id, create=False)
        except _NotHere as exc:
            return ErrorCode.REQUEST_TIMED_OUT if exc.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and self.active \
                else ErrorCode.NOT_LEADER_OR_FOLLOWER
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.NONE
        written: dict[TopicPartition, CommittedOffset] = {}

        async def complete(version: int) -> None:
            written.update(await self.store.complete_pending(group_id, producer_id, committed, version) or {})
        code = await self._write_offsets(group, complete, "completing transactional offsets")
        if code == ErrorCode.NONE:
            if committed:
                self.metrics.offset_commits += len(written)
            log.debug("group %s: producer %d's transactional offsets %s", printable(group_id), producer_id,
                      f"committed ({len(written)})" if committed else "dropped")
            return code
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if code == ErrorCode.NOT_COORDINATOR else ErrorCode.REQUEST_TIMED_OUT

    async def unstable_offsets(self, group_id: str) -> tuple[int, set[TopicPartition]]:
        """The group's error and the partitions with a pending transactional commit in it (OffsetFetch's
        RequireStable answers UNSTABLE_OFFSET_COMMIT for those)."""
        try:
            self._check_owner(group_id)
            pending = await self.store.pending_offsets(group_id)
        except _NotHere as exc:
            return exc.code, set()
        except GroupStoreError as exc:
            log.warning("group %s: reading transactional offsets failed: %s", printable(group_id), exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, set()
        return ErrorCode.NONE, {tp for p in pending.values() for tp in p.offsets}

    async def fetch_offsets(self, group_id: str,
                            partitions: list[TopicPartition] | None) -> tuple[int, dict[TopicPartition, CommittedOffset]]:
        """The group's error and its committed offsets of ``partitions`` (all when None)."""
        try:
            self._check_owner(group_id)
            return ErrorCode.NONE, await self.store.fetch_offsets(group_id, partitions)
        except _NotHere as exc:
            return exc.code, {}
        except GroupStoreError as exc:
            log.warning("group %s: reading offsets failed: %s", printable(group_id), exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, {}

    # -- the stored record -------------------------------------------------------------------------

    async def _store_group(self, group: GroupMetadata) -> None:
        """Write the group's record (serialized per group: each write is conditional on the last one's version).

        The write goes on if the request that asked for it is cancelled (its client went away while it waited):
        a write cut short would leave the group's version behind the store's."""
        write = asyncio.ensure_future(self._write_group(group))
        write.add_done_callback(_retrieve_exception)
        await asyncio.shield(write)

    async def _write_group(self, group: GroupMetadata) -> None:
        lock = self._store_locks.setdefault(group.group_id, asyncio.Lock())
        async with lock:
            try:
                group.store_version = await asyncio.wait_for(
                    self.store.store_group(group.group_id, group.to_record(), group.store_version),
                    self.config.commit_timeout_ms / 1000)
            except GroupFenced as exc:
                log.warning("%s; handing the group over", exc)
                self._unload(group.group_id, ErrorCode.NOT_COORDINATOR)
                raise _NotHere(ErrorCode.NOT_COORDINATOR) from None
            except (GroupStoreError, asyncio.TimeoutError) as exc:
                log.warning("group %s: storing it failed: %s", printable(group.group_id), describe_error(exc))
                raise _NotHere(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None

    async def _store_quietly(self, group: GroupMetadata) -> None:
        try:
            await self._store_group(group)
        except _NotHere:
            pass  # logged where it failed; the next generation's write tries again

    # -- DescribeGroups, ListGroups, DeleteGroups ------------------------------------------------

    async def describe_group(self, group_id: str) -> dict:
        try:
            group = await self._group(group_id, create=False)
        except _NotHere as exc:
            return {"error_code": exc.code, "group_id": group_id, "group_state": "", "protocol_type": "",
                    "protocol_data": "", "members": []}
        if group is None:
            return {"error_code": ErrorCode.NONE, "group_id": group_id, "group_state": GroupState.DEAD.value,
                    "protocol_type": "", "protocol_data": "", "members": []}
        stable = group.is_in(GroupState.STABLE)
        members = [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata_for(group.protocol_name) if stable and group.protocol_name else b"",
            "member_assignment": m.assignment if stable else b"",
        } for m in group.members.values()]
        return {"error_code": ErrorCode.NONE, "group_id": group_id, "group_state": group.state.value,
                "protocol_type": group.protocol_type or "", "protocol_data": (group.protocol_name or "") if stable else "",
                "members": members}

    async def list_groups(self) -> tuple[int, list[dict]]:
        """Every group this broker coordinates, stored or only in memory, with its protocol type."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        try:
            stored = await self.store.group_ids()
        except GroupStoreError as exc:
            log.warning("listing groups failed: %s", exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        listed = []
        for group_id in sorted(set(stored) | set(self._groups)):
            if not self.owns(group_id):
                continue
            try:
                group = await self._group(group_id, create=False)
            except _NotHere:
                continue
            if group is not None and not group.is_in(GroupState.DEAD):
                listed.append({"group_id": group_id, "protocol_type": group.protocol_type or "",
                               "group_state": group.state.value})
        return ErrorCode.NONE, listed

    async def delete_group(self, group_id: str) -> int:
        try:
            group = await self._group(group_id, create=False)
        except _NotHere as exc:
            return exc.code
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if not group.is_in(GroupState.EMPTY):
            return ErrorCode.NON_EMPTY_GROUP
        return await self._remove_group(group)

    async def _remove_group(self, group: GroupMetadata) -> int:
        group.transition_to(GroupState.DEAD, self._now())
        try:
            await self.store.delete_group(group.group_id, group.store_version)
        except GroupFenced:
            self._unload(group.group_id, ErrorCode.NOT_COORDINATOR)
            return ErrorCode.NOT_COORDINATOR
        except GroupStoreError as exc:
            log.warning("group %s: deleting it failed: %s", printable(group.group_id), exc)
            self._unload(group.group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self._groups.pop(group.group_id, None)
        self._store_locks.pop(group.group_id, None)
        log.info("group %s deleted", printable(group.group_id))
        return ErrorCode.NONE

    # -- offset expiry ---------------------------------------------------------------------------

    async def expire_offsets(self) -> int:
        """Remove expired committed offsets of the groups coordinated here, and empty groups left with none
        (Kafka's offsets-retention rules: an empty group's offsets expire ``offsets.retention.minutes`` after it
        became empty; offsets committed outside any membership, after their commit; an explicit retention of
        OffsetCommit v2-v4 at its own time). Returns how many offsets were removed."""
        if not self.active:
            return 0
        removed = 0
        try:
            stored = await self.store.group_ids()
        except GroupStoreError as exc:
            log.warning("offset expiry skipped: %s", exc)
            return 0
        for group_id in stored:
            if not self.owns(group_id):
                continue
            try:
                group = await self._group(group_id, create=False)
                if group is None:
                    continue
                removed += await self._expire_group_offsets(group)
            except (_NotHere, GroupStoreError) as exc:
                log.warning("offset expiry of group %s skipped: %s", printable(group_id), exc)
        self.metrics.expired_offsets += removed
        return removed

    async def _expire_group_offsets(self, group: GroupMetadata) -> int:
        now = self._now()
        retention = self.config.offsets_retention_ms
        offsets = await self.store.fetch_offsets(group.group_id, None)
        empty = group.is_in(GroupState.EMPTY)
        # KIP-211: while a consumer group is active, the offsets of topics it no longer subscribes to still expire.
        subscribed = None if empty else group.subscribed_topics()

        def expired(topic: str, committed: CommittedOffset) -> bool:
            if committed.expire_timestamp is not None:
                return committed.expire_timestamp <= now
            if not empty:
                return subscribed is not None and topic not in subscribed \
                    and committed.commit_timestamp + retention <= now
            since = group.state_timestamp_ms if group.protocol_type else committed.commit_timestamp
            return since + retention <= now
        gone = [tp for tp, committed in offsets.items() if expired(tp[0], committed)]
        if gone:
            try:
                await self.store.delete_offsets(group.group_id, gone, group.store_version)
            except GroupFenced:
                self._unload(group.group_id, ErrorCode.NOT_COORDINATOR)
                return 0
            log.info("group %s: %d committed offset(s) expired", printable(group.group_id), len(gone))
        if empty and len(gone) == len(offsets) and not group.pending_members \
                and not await self.store.pending_offsets(group.group_id):
            # Pending transactional offsets keep the group (Kafka's hasOffsets): their marker still comes.
            await self._remove_group(group)
        return len(gone)


def _join_error(code: int, member_id: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "generation_id": NO_GENERATION, "protocol_name": "",
            "leader": "", "member_id": member_id, "members": []}


def _sync_answer(code: int, assignment: bytes = b"") -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "assignment": assignment}


def _retrieve_exception(task: asyncio.Future) -> None:
    """Mark a shielded task's exception as seen (it is logged where it is raised, and its waiter may be gone)."""
    if not task.cancelled():
        task.exception()


def _settle(future: Any, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


def partitions_by_topic(offsets: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition indexes grouped by topic, in the order given."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in offsets:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic
