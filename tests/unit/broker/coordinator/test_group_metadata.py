"""GroupMetadata and MemberMetadata without a coordinator: the protocol's allowed transitions, the leader and its
successor, the protocol vote, static members, the subscribed topics and the stored record's round trip."""

from __future__ import annotations

import pytest

from broker.coordinator.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    GroupState,
    IllegalStateTransition,
    MemberMetadata,
)
from pipeline.protocol.consumer_protocol import encode_subscription


def member(member_id: str, *protocols: str, instance: str | None = None, topics: tuple[str, ...] = ("t",),
           rebalance_timeout_ms: int = 300_000) -> MemberMetadata:
    subscription = encode_subscription({"topics": list(topics), "user_data": None})
    return MemberMetadata(member_id, instance, "client", "/127.0.0.1", rebalance_timeout_ms, 10_000,
                          CONSUMER_PROTOCOL_TYPE, [(name, subscription) for name in protocols or ("range",)])


def test_only_the_transitions_of_the_classic_protocol_are_allowed() -> None:
    group = GroupMetadata("g")
    with pytest.raises(IllegalStateTransition, match="Empty -> Stable"):
        group.transition_to(GroupState.STABLE, 1)
    group.transition_to(GroupState.PREPARING_REBALANCE, 5)
    assert group.is_in(GroupState.PREPARING_REBALANCE) and group.state_timestamp_ms == 5
    assert not group.can_rebalance()
    group.transition_to(GroupState.COMPLETING_REBALANCE, 6)
    assert group.can_rebalance()
    group.transition_to(GroupState.STABLE, 7)
    group.transition_to(GroupState.DEAD, 8)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.PREPARING_REBALANCE, 9)


def test_the_first_member_leads_and_a_rejoined_member_succeeds_a_leader_that_left() -> None:
    group = GroupMetadata("g")
    for member_id in ("a", "b", "c"):
        group.add(member(member_id))
    assert group.leader_id == "a" and group.protocol_type == CONSUMER_PROTOCOL_TYPE
    group.members["c"].awaiting_join = object()
    assert group.remove("a") is not None
    assert group.leader_id == "c"
    assert group.remove("missing") is None
    group.remove("b")
    group.remove("c")
    assert group.leader_id is None and not group.members


def test_the_protocol_is_the_members_vote_among_the_protocols_all_support() -> None:
    group = GroupMetadata("g")
    group.add(member("a", "roundrobin", "range"))
    group.add(member("b", "range", "roundrobin", "sticky"))
    group.add(member("c", "range", "roundrobin"))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "range"
    assert group.supports(CONSUMER_PROTOCOL_TYPE, [("roundrobin", b"")])
    assert not group.supports(CONSUMER_PROTOCOL_TYPE, [("sticky", b"")])
    assert not group.supports("connect", [("range", b"")])
    assert GroupMetadata("empty").supports("anything", [("x", b"")])
    assert not GroupMetadata("empty").supports("", [("x", b"")])


def test_the_next_generation_chooses_the_protocol_or_empties_the_group() -> None:
    group = GroupMetadata("g")
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    new = member("a", "range")
    new.is_new = True
    group.add(new)
    group.init_next_generation(2)
    assert (group.generation_id, group.protocol_name, group.state) == (1, "range", GroupState.COMPLETING_REBALANCE)
    assert not new.is_new
    group.transition_to(GroupState.PREPARING_REBALANCE, 3)
    group.remove("a")
    group.init_next_generation(4)
    assert (group.generation_id, group.protocol_name, group.state) == (2, None, GroupState.EMPTY)


def test_a_static_member_keeps_its_place_and_leadership_under_a_new_member_id() -> None:
    group = GroupMetadata("g")
    group.add(member("old", instance="host-1"))
    group.add(member("other"))
    assert group.static_member_id("host-1") == "old" and group.static_member_id(None) is None
    replaced = group.replace_static_member("host-1", "old", "new")
    assert replaced.member_id == "new" and group.has("new") and not group.has("old")
    assert group.leader_id == "new" and group.static_member_id("host-1") == "new"
    group.remove("new")
    assert group.static_member_id("host-1") is None


def test_joining_counts_the_pending_members_and_the_longest_rebalance_timeout() -> None:
    group = GroupMetadata("g")
    group.add(member("a", rebalance_timeout_ms=1000))
    group.add(member("b", rebalance_timeout_ms=5000))
    group.pending_members.add("c")
    group.members["a"].awaiting_join = object()
    assert group.awaiting_join_count == 1 and not group.all_members_joined()
    assert [m.member_id for m in group.not_yet_rejoined()] == ["b"]
    assert group.max_rebalance_timeout_ms() == 5000
    group.members["b"].awaiting_join = object()
    group.pending_members.clear()
    assert group.all_members_joined()
    assert GroupMetadata("empty").max_rebalance_timeout_ms() == 0


def test_the_subscribed_topics_are_known_only_for_a_consumer_group_with_a_generation() -> None:
    group = GroupMetadata("g")
    group.add(member("a", topics=("clicks", "views")))
    group.add(member("b", topics=("views", "orders")))
    assert group.subscribed_topics() is None
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    group.init_next_generation(2)
    assert group.subscribed_topics() == {"clicks", "views", "orders"}
    group.members["b"].protocols = [("range", b"\x00")]
    assert group.subscribed_topics() is None


def test_a_stored_group_comes_back_stable_with_its_members_and_assignments() -> None:
    group = GroupMetadata("g")
    group.add(member("a", instance="host-1"))
    group.add(member("b"))
    group.transition_to(GroupState.PREPARING_REBALANCE, 10)
    group.init_next_generation(20)
    group.members["b"].assignment = b"\x01\x02"
    record = group.to_record()
    loaded = GroupMetadata.from_record("g", record, version=7, now_ms=99)
    assert loaded.state is GroupState.STABLE and loaded.store_version == 7
    assert (loaded.generation_id, loaded.protocol_name, loaded.leader_id) == (1, "range", "a")
    assert loaded.state_timestamp_ms == 20
    assert loaded.members["b"].assignment == b"\x01\x02"
    assert loaded.static_member_id("host-1") == "a"
    assert loaded.leader_view() == group.leader_view()
    assert loaded.to_record() == record
    empty = GroupMetadata.from_record("g", {"generation": 3, "members": []}, version=1, now_ms=99)
    assert empty.state is GroupState.EMPTY and empty.leader_id is None and empty.state_timestamp_ms == 99
