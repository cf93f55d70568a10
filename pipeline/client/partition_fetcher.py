"""PartitionFetcher: the I/O of fetching partitions from their leaders, shared by Consumer and ConsumerFetcher.

One ``fetch_round`` sends one long-poll Fetch to every leader broker for the partitions it leads (all
requests first, then the answers read, so the brokers wait in parallel) and applies each partition's
result to its position through the :class:`~pipeline.client.fetch_state.FetchStateMachine`. A
partition without a leader, whose leader cannot be reached, or with a retriable error is paused alone;
the cluster metadata is then invalidated so the next lookup finds the new leader. Records go to the
``deliver`` callback, errors the reader must see to ``fail``.
"""

from __future__ import annotations

from typing import Callable, Generic, Sequence, TypeVar

from pipeline.client.cluster import Cluster
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import KafkaConnectionError
from pipeline.client.fetch_state import FetchOutcome, FetchPosition, FetchStateMachine
from pipeline.client.simple_consumer import (
    READ_UNCOMMITTED,
    FetchRequest,
    MessageSet,
    fetch_request_body,
    list_offsets,
    partitions_by_key,
    read_message_set,
)
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import KafkaProtocolError

__all__ = ["PartitionFetcher"]

P = TypeVar("P", bound=FetchPosition)

_DELIVER = FetchOutcome.DELIVER
_PAUSE = FetchOutcome.PAUSE
_FAIL = FetchOutcome.FAIL


class PartitionFetcher(Generic[P]):
    """Fetches :class:`FetchPosition` items from their leaders through ``cluster``.

    ``deliver(position, result)`` gets each partition's records (its position already moved past them);
    ``fail(position, error)`` each error the reader must act on; ``started(position)``, if given, each
    position whose start was just looked up.
    """

    def __init__(self, cluster: Cluster, machine: FetchStateMachine, *, min_bytes: int, max_bytes: int,
                 deliver: Callable[[P, MessageSet], None], fail: Callable[[P, BaseException], None],
                 started: Callable[[P], None] | None = None, isolation_level: int = READ_UNCOMMITTED) -> None:
        self.cluster = cluster
        self.isolation_level = isolation_level
        self.machine = machine
        self._min_bytes = min_bytes
        self._max_bytes = max_bytes
        self._deliver = deliver
        self._fail = fail
        self._started = started

    def look_up_start(self, position: P) -> None:
        """Set ``position.fetch_offset`` from ListOffsets at its start time (earliest or latest)."""
        when = position.start_time
        assert when is not None, "a position without a start time cannot be looked up"
        connection = self.cluster.leader_connection(position.topic, position.partition)
        offsets = list_offsets(connection, position.topic, position.partition, when, 1, self.isolation_level)
        if not offsets:
            raise KafkaConnectionError(f"no offset for {position.topic}-{position.partition} at time {when}")
        position.fetch_offset = offsets[0]
        if self._started is not None:
            self._started(position)

    def fetch_round(self, positions: Sequence[P], max_wait_ms: int) -> None:
        """One long-poll Fetch per leader for ``positions``; every result is applied before returning."""
        machine = self.machine
        cluster = self.cluster
        by_leader: dict[int, list[P]] = {}
        stale = False
        for position in positions:
            try:
                if position.fetch_offset is None:
                    error = machine.start_unknown(position)
                    if error is not None:
                        self._fail(position, error)
                        continue
                    self.look_up_start(position)
                leader = cluster.leader(position.topic, position.partition)
            except (KafkaConnectionError, KafkaProtocolError) as exc:
                if isinstance(exc, KafkaProtocolError) and not exc.retriable:
                    self._fail(position, exc)
                    continue
                leader = -1
            if leader < 0:
                machine.pause(position)
                stale = True
                continue
            by_leader.setdefault(leader, []).append(position)
        sent: list[tuple[int, BrokerConnection, list[P], list[FetchRequest]]] = []
        for leader, group in by_leader.items():
            requests = [FetchRequest(p.topic, p.partition, p.fetch_offset, p.fetch_size)  # type: ignore[arg-type]
                        for p in group]
            body = fetch_request_body(requests, max_wait_ms=max_wait_ms, min_bytes=self._min_bytes,
                                      max_bytes=self._max_bytes, isolation_level=self.isolation_level)
            try:
                connection = cluster.connection(leader)
                connection.send(ApiKey.FETCH, body)
            except KafkaConnectionError:
                self._unreachable(leader, group)
                continue
            sent.append((leader, connection, group, requests))
        try:
            for leader, connection, group, requests in sent:
                try:
                    parts = partitions_by_key(connection.receive()[1])
                except (KafkaConnectionError, KafkaProtocolError):
                    self._unreachable(leader, group)
                    continue
                for position, request in zip(group, requests):
                    result = read_message_set(request.topic, request.partition, request.offset,
                                              parts.get((request.topic, request.partition)), self.isolation_level)
                    outcome, error = machine.take(position, result)
                    if outcome is _DELIVER:
                        self._deliver(position, result)
                    elif outcome is _PAUSE:
                        stale = True
                    elif outcome is _FAIL:
                        self._fail(position, error)  # type: ignore[arg-type]
        finally:
            # Responses still unread (a callback raised) would desynchronise these connections.
            for _, connection, _, _ in sent:
                if connection.in_flight:
                    connection.close()
        if stale:
            cluster.invalidate()

    def _unreachable(self, leader: int, group: list[P]) -> None:
        self.cluster.invalidate(leader)
        for position in group:
            self.machine.pause(position)
