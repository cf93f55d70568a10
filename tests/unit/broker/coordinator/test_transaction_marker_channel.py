"""TransactionMarkerChannelManager with this broker's partitions written in process: one request per round with
every partition's marker, retries after retriable answers and while a partition has no leader, giving up on a
deleted topic, stopping when a later coordinator fenced this one, and shutting down mid-write."""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator.transaction_marker_channel import (
    NO_ROUTE,
    MarkerChannelClosed,
    TransactionMarker,
    TransactionMarkerChannelManager,
    marker_units,
)
from pipeline.protocol.errors import ErrorCode

E = ErrorCode


class Partitions:
    """This broker's WriteTxnMarkers: answers from a script per (topic, partition), NONE once it runs out."""

    def __init__(self, script: dict[tuple[str, int], list[int]] | None = None) -> None:
        self.script = script or {}
        self.requests: list[list[dict]] = []

    async def write(self, markers: list[dict]) -> list[dict]:
        self.requests.append(markers)
        return [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p, "error_code": (self.script.get((t["name"], p)) or [E.NONE]).pop(0)}
                for p in t["partition_indexes"]]} for t in m["topics"]]} for m in markers]


def channel(route, partitions: Partitions) -> TransactionMarkerChannelManager:
    manager = TransactionMarkerChannelManager(1, route, lambda broker: None, backoff_ms=1, max_backoff_ms=2)
    manager.local = partitions.write
    return manager


def marker(*units) -> TransactionMarker:
    return TransactionMarker(7, 3, True, 5, frozenset(units))


def test_one_request_carries_every_partition_and_retriable_answers_are_retried() -> None:
    partitions = Partitions({("a", 0): [E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS]})
    manager = channel(lambda topic, partition, group: 1, partitions)
    assert asyncio.run(manager.write(marker(("a", 0, None), ("a", 1, None), ("b", 0, None))))
    first, second, third = partitions.requests
    assert first == [{"producer_id": 7, "producer_epoch": 3, "transaction_result": True, "coordinator_epoch": 5,
                      "topics": [{"name": "a", "partition_indexes": [0, 1]}, {"name": "b", "partition_indexes": [0]}]}]
    assert second[0]["topics"] == third[0]["topics"] == [{"name": "a", "partition_indexes": [0]}]
    assert manager.retries == 2


def test_a_partition_without_a_leader_waits_and_a_deleted_topic_is_given_up() -> None:
    rounds = {"n": 0}
    deleted = {"gone"}

    def route(topic: str, partition: int, group: str | None) -> int | None:
        if topic in deleted:
            return None
        if topic == "moving":
            rounds["n"] += 1
            return NO_ROUTE if rounds["n"] < 3 else 1
        return 1

    partitions = Partitions({("vanishing", 0): [E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION]})

    async def scenario() -> bool:
        written = asyncio.ensure_future(channel(route, partitions).write(
            marker(("gone", 0, None), ("moving", 0, None), ("vanishing", 0, None))))
        while len(partitions.requests) < 2:
            await asyncio.sleep(0.001)
        deleted.add("vanishing")
        return await written

    assert asyncio.run(scenario())
    asked = [(t["name"], p) for request in partitions.requests for t in request[0]["topics"]
             for p in t["partition_indexes"]]
    assert ("gone", 0) not in asked and asked.count(("moving", 0)) == 1


def test_a_fenced_coordinator_stops_sending() -> None:
    partitions = Partitions({("a", 0): [E.TRANSACTION_COORDINATOR_FENCED]})
    assert not asyncio.run(channel(lambda *unit: 1, partitions).write(marker(("a", 0, None), ("a", 1, None))))
    assert len(partitions.requests) == 1


def test_shutdown_stops_a_write_in_progress() -> None:
    async def scenario() -> None:
        manager = channel(lambda *unit: NO_ROUTE, Partitions())
        written = asyncio.ensure_future(manager.write(marker(("a", 0, None))))
        await asyncio.sleep(0.01)
        manager.close()
        with pytest.raises(MarkerChannelClosed):
            await written

    asyncio.run(scenario())


def test_each_groups_offsets_partition_is_a_unit_of_its_own() -> None:
    units = marker_units(frozenset({("a", 0), ("__consumer_offsets", 9)}), frozenset({"g1", "g2"}),
                         "__consumer_offsets", {"g1": 9, "g2": 9}.__getitem__)
    assert units == {("a", 0, None), ("__consumer_offsets", 9, "g1"), ("__consumer_offsets", 9, "g2")}


def test_markers_for_another_broker_written_meanwhile_share_one_request() -> None:
    requests: list[dict] = []

    def other_broker(broker_id: int, body: dict) -> dict:
        requests.append(body)
        return {"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p, "error_code": E.NONE}
                                               for p in t["partition_indexes"]]} for t in m["topics"]]}
            for m in body["markers"]]}

    manager = channel(lambda *unit: 2, Partitions())
    manager._request = other_broker

    async def scenario() -> list[bool]:
        return await asyncio.gather(*(manager.write(TransactionMarker(pid, 0, True, 0, frozenset({("a", pid, None)})))
                                      for pid in (1, 2, 3)))

    assert asyncio.run(scenario()) == [True, True, True]
    assert [[m["producer_id"] for m in body["markers"]] for body in requests] == [[1, 2, 3]]
