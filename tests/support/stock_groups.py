"""Helpers for the stock-client consumer-group tests: broker settings, producing numbered messages, waiting for
a group's members to share a topic, and reading a group's committed offsets from its coordinator."""

from __future__ import annotations

from typing import Iterable, Sequence

from tests.support import group_wire, wire
from tests.support.polling import wait_until
from tests.support.stock_group_member import GroupMember

#: Broker settings that let the tests' clients use sessions of a few seconds and form groups at once.
GROUP_SETTINGS = {"group.min.session.timeout.ms": 1000, "group.initial.rebalance.delay.ms": 0}


def produce_batch(bootstrap: str, topic: str, tag: str, count: int, partitions: int, **config: object) -> list[str]:
    """Produce ``count`` values ``<tag>-<i>`` with confluent-kafka, message i to partition i % partitions, and
    wait until every one is acknowledged; return the values."""
    from confluent_kafka import Producer

    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3, **config})
    values = [f"{tag}-{i}" for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % partitions, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "messages not acknowledged within 30 s"
    assert failures == [], failures[:5]
    return values


def owned(members: Sequence[GroupMember]) -> list[frozenset[int] | None]:
    return [member.read().owned for member in members]


def wait_shared(members: Sequence[GroupMember], partitions: int, timeout: float = 30.0) -> list[frozenset[int]]:
    """Wait until ``members`` (and no one else, as far as they report) own every partition exactly once, each
    at least one; return their assignments in order."""
    def shared() -> list[frozenset[int]] | None:
        sets = owned(members)
        if any(not s for s in sets):
            return None
        flat = [p for s in sets for p in s]  # type: ignore[union-attr]
        return sets if sorted(flat) == list(range(partitions)) else None  # type: ignore[return-value]
    return wait_until(shared, timeout, interval=0.1,
                      message=lambda: f"members sharing {partitions} partitions (they own {owned(members)})")


def processed_values(members: Iterable[GroupMember]) -> list[str]:
    return [value for member in members for _, _, value in member.read().processed]


def wait_consumed(members: Sequence[GroupMember], values: Iterable[str], timeout: float = 30.0) -> None:
    """Wait until the members together processed every one of ``values``."""
    wanted = set(values)
    wait_until(lambda: wanted <= set(processed_values(members)), timeout, interval=0.1,
               message=lambda: f"{len(wanted - set(processed_values(members)))} of {len(wanted)} messages consumed")


def coordinator_of(bootstrap: str, group: str) -> group_wire.Coordinator:
    """Ask the first broker of ``bootstrap`` (retrying while it has none) which broker coordinates ``group``."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)

    def found() -> group_wire.Coordinator | None:
        with wire.KafkaConnection(host, int(port)) as conn:
            answer = group_wire.find_coordinator(conn, group)
        return answer if answer.error_code == group_wire.NONE else None
    return wait_until(found, 20, interval=0.2, message=f"a coordinator for group {group!r}")


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch from its coordinator): partition -> offset (-1: none)."""
    coordinator = coordinator_of(bootstrap, group)
    with wire.KafkaConnection(coordinator.host, coordinator.port) as conn:
        answer = group_wire.offset_fetch(conn, group, topic, list(range(partitions)))
    errors = {p: error for p, (_, error) in answer.items() if error}
    assert not errors, f"OffsetFetch errors: {errors}"
    return {p: offset for p, (offset, _) in answer.items()}


def wait_committed(bootstrap: str, group: str, topic: str, expected: dict[int, int], timeout: float = 30.0) -> None:
    """Wait until the group's committed offsets are ``expected``."""
    wait_until(lambda: committed(bootstrap, group, topic, len(expected)) == expected, timeout, interval=0.2,
               message=lambda: f"committed offsets {expected} (have {committed(bootstrap, group, topic, len(expected))})")


def end_offsets(batches: Iterable[Sequence[str]], partitions: int) -> dict[int, int]:
    """Each partition's log end offset after producing ``batches`` with ``produce_batch`` into an empty topic."""
    batches = list(batches)
    return {p: sum(len(batch[p::partitions]) for batch in batches) for p in range(partitions)}
