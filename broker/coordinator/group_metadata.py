"""GroupMetadata and MemberMetadata: one consumer group's members, generation and state, without I/O.

The classic group protocol's state machine (Kafka's GroupMetadata): a group is Empty (no members, maybe
committed offsets), PreparingRebalance (members are (re)joining), CompletingRebalance (the generation is
formed, the leader's assignment is awaited), Stable (everyone has its assignment) or Dead (removed). The
coordinator drives the transitions; this module only records members, chooses the protocol and the
leader, and checks that a transition is one the protocol allows. The futures of requests waiting on the
group (``awaiting_join``, ``awaiting_sync``) are opaque slots here; the coordinator completes them.
"""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pipeline.protocol.codec import ProtocolError
from pipeline.protocol.consumer_protocol import decode_subscription

#: The protocol type of Kafka's consumers' groups (others, e.g. Connect's, relay metadata we do not read).
CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    """The states of the classic group protocol, with the names DescribeGroups reports."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# The states each state may be entered from (Kafka's validPreviousStates).
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """A transition the group protocol does not have (a coordinator bug, never a client's doing)."""


@dataclass(eq=False)
class MemberMetadata:
    """One member of a group: who it is, what it can run (protocol name -> metadata) and its assignment."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Set by the coordinator: the pending JoinGroup / SyncGroup answer, and whether the member has joined
    # the generation being formed since the rebalance began.
    awaiting_join: Any = None
    awaiting_sync: Any = None
    is_new: bool = False
    heartbeat_timer: Any = None

    def metadata_for(self, protocol: str) -> bytes:
        """This member's metadata (its subscription) for ``protocol``."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether ``protocols`` is exactly what this member sent last (a rejoin that changes nothing)."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (its list is in preference order)."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise KeyError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class GroupMetadata:
    """One group as its coordinator knows it."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED whose JoinGroup has not come back yet.
    pending_members: set[str] = field(default_factory=set)
    # Set when a member joins a group in its initial delayed rebalance (the delay then extends).
    new_member_added: bool = False
    # The version of the group's stored record this coordinator last read or wrote (-1: none stored).
    store_version: int = -1

    # -- state -----------------------------------------------------------------------------------

    def is_in(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- members ---------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        self.pending_members.discard(member_id)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            # The next leader is a member already rejoined, if any (its JoinGroup answer can carry the members).
            successors = [m for m in self.members.values() if m.awaiting_join is not None] or list(self.members.values())
            self.leader_id = successors[0].member_id if successors else None
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """Give a rejoining static member a new member id, keeping its place and assignment (the old id is fenced)."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        return member

    @property
    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def all_members_joined(self) -> bool:
        return not self.pending_members and self.awaiting_join_count == len(self.members)

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -------------------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols): an empty group takes
        any non-empty list; otherwise the type must match and one protocol must be common to every member."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        common: set[str] | None = None
        for member in self.members.values():
            names = {name for name, _ in member.protocols}
            common = names if common is None else common & names
        return common or set()

    def select_protocol(self) -> str:
        """The protocol the members vote for, each for its most preferred common one (ties: the first seen)."""
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return max(votes, key=lambda name: votes[name])

    def init_next_generation(self, now_ms: int) -> None:
        """Form the next generation from the members that joined: Empty when none did."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        for member in self.members.values():
            member.is_new = False

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members subscribe to, for a group of the consumer protocol; None when not known
        (another protocol type, no generation yet, or metadata that does not decode)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(decode_subscription(member.metadata_for(self.protocol_name))["topics"])
        except (ProtocolError, KeyError):
            return None
        return topics

    def leader_view(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, instance id, metadata for the chosen protocol) of every member: the leader's JoinGroup answer."""
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name)) for m in self.members.values()]

    # -- the stored record -----------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """What the coordinator stores for the group (Kafka's GroupMetadataValue)."""
        return {
            "version": 1,
            "protocol_type": self.protocol_type or "",
            "generation": self.generation_id,
            "protocol": self.protocol_name,
            "leader": self.leader_id,
            "current_state_timestamp": self.state_timestamp_ms,
            "members": [{
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "session_timeout_ms": m.session_timeout_ms,
                "subscription": _b64(m.metadata_for(self.protocol_name)) if self.protocol_name else "",
                "assignment": _b64(m.assignment),
            } for m in self.members.values()],
        }

    @classmethod
    def from_record(cls, group_id: str, record: dict[str, Any], version: int, now_ms: int) -> GroupMetadata:
        """A group as its stored record left it: Stable with its members and their assignments, or Empty."""
        protocol = record.get("protocol")
        group = cls(group_id, generation_id=int(record.get("generation", 0)),
                    protocol_type=record.get("protocol_type") or None, protocol_name=protocol,
                    state_timestamp_ms=int(record.get("current_state_timestamp") or now_ms), store_version=version)
        for entry in record.get("members", ()):
            group.add(MemberMetadata(
                entry["member_id"], entry.get("group_instance_id"), entry.get("client_id", ""),
                entry.get("client_host", ""), int(entry["rebalance_timeout_ms"]), int(entry["session_timeout_ms"]),
                group.protocol_type or "", [(protocol, _unb64(entry.get("subscription", "")))] if protocol else [],
                _unb64(entry.get("assignment", ""))))
        group.leader_id = record.get("leader") if group.members else None
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text) if text else b""
