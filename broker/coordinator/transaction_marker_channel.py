"""TransactionMarkerChannelManager: the coordinator's WriteTxnMarkers to the partitions of a transaction it ended.

After PrepareCommit or PrepareAbort is stored, every partition of the transaction gets the marker from the broker
that leads it: one WriteTxnMarkers v1 request per broker, this broker's own partitions in process (through the
handler KafkaApis serves WriteTxnMarkers with), others over an inter-broker connection with the inter-broker
listener's security. A ``__consumer_offsets`` partition's marker goes to the coordinator of each group the
transaction committed offsets for (here groups are placed one by one, not by offsets partition). Retriable answers
and unreachable brokers are retried with backoff, each time asking the broker's metadata again where the partition
lives now; a partition whose topic no longer exists is given up. TRANSACTION_COORDINATOR_FENCED or
INVALID_PRODUCER_EPOCH mean another coordinator (or a later epoch of the producer) took over: sending stops and the
transaction is left to it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Awaitable, Callable

from broker.metadata import BrokerEndpoint
from pipeline.client.connection import BrokerConnection
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: One destination of a marker: a partition, and for a __consumer_offsets partition the group whose coordinator
#: takes it (None for a data partition).
MarkerUnit = tuple[str, int, "str | None"]
#: Where a unit's marker goes now: a broker id, None when its topic no longer exists, -1 while it has no leader.
Route = Callable[[str, int, "str | None"], "int | None"]
#: Writes WriteTxnMarkers' entries in process and gives the response's (KafkaApis.write_txn_markers).
LocalWriter = Callable[[list[dict]], Awaitable[list[dict]]]
NO_ROUTE = -1

_GIVE_UP_SENDING = frozenset({ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})


@dataclass(frozen=True)
class TransactionMarker:
    """What one ended transaction asks its partitions to write."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    units: frozenset[MarkerUnit]


class MarkerChannelClosed(Exception):
    """The channel was shut down while markers were being written (the next coordinator resumes them)."""


class TransactionMarkerChannelManager:
    """Writes the markers of ended transactions; ``write`` returns once every unit has its marker."""

    def __init__(self, broker_id: int, route: Route, endpoint: Callable[[int], BrokerEndpoint | None],
                 security: ClientSecurity = PLAINTEXT_SECURITY, request_timeout_ms: int = 30000,
                 backoff_ms: int = 100, max_backoff_ms: int = 1000) -> None:
        self.broker_id = broker_id
        self._route = route
        self._endpoint = endpoint
        self._security = security
        self._timeout_s = request_timeout_ms / 1000
        self._backoff_s = backoff_ms / 1000
        self._max_backoff_s = max_backoff_ms / 1000
        # This broker's WriteTxnMarkers handler (set once KafkaApis exists).
        self.local: LocalWriter | None = None
        self._connections: dict[int, tuple[BrokerConnection, threading.Lock]] = {}
        # Per other broker: the markers waiting for the request in flight, and the task sending them.
        self._queues: dict[int, list[tuple[dict, asyncio.Future]]] = {}
        self._senders: dict[int, asyncio.Task] = {}
        self._closed = False
        self.retries = 0

    async def write(self, marker: TransactionMarker) -> bool:
        """Write ``marker`` to each of its units; False when sending stopped because another coordinator or a
        later producer epoch took over (the caller then leaves the transaction as it is)."""
        pending = set(marker.units)
        backoff = self._backoff_s
        while pending:
            if self._closed:
                raise MarkerChannelClosed("the marker channel is shut down")
            by_broker: dict[int, set[MarkerUnit]] = {}
            for unit in list(pending):
                target = self._route(*unit)
                if target is None:
                    log.info("transaction marker for %s-%d given up: the topic no longer exists", unit[0], unit[1])
                    pending.discard(unit)
                elif target != NO_ROUTE:
                    by_broker.setdefault(target, set()).add(unit)
            answers = await asyncio.gather(*(self._send(broker, marker, units)
                                             for broker, units in by_broker.items()))
            for (broker, units), answer in zip(by_broker.items(), answers):
                for unit in units:
                    code = answer.get((unit[0], unit[1]), ErrorCode.UNKNOWN_SERVER_ERROR) if answer is not None \
                        else None
                    if code == ErrorCode.NONE:
                        pending.discard(unit)
                    elif code in _GIVE_UP_SENDING:
                        log.info("transaction markers of producer %d stop: broker %d answered %s",
                                 marker.producer_id, broker, ErrorCode(code).name)
                        return False
                    elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and self._route(*unit) is None:
                        pending.discard(unit)
            if pending:
                self.retries += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
        return True

    async def _send(self, broker_id: int, marker: TransactionMarker, units: set[MarkerUnit]) -> dict | None:
        """The broker's error code per partition, or None when it could not be asked."""
        topics: dict[str, set[int]] = {}
        for topic, partition, _ in units:
            topics.setdefault(topic, set()).add(partition)
        entry = {"producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch,
                 "transaction_result": marker.committed, "coordinator_epoch": marker.coordinator_epoch,
                 "topics": [{"name": t, "partition_indexes": sorted(p)} for t, p in sorted(topics.items())]}
        try:
            if broker_id == self.broker_id and self.local is not None:
                [result] = await self.local([entry])
            else:
                result = await self._queued(broker_id, entry)
        except Exception as exc:  # any failure to ask is retried, the next time through the metadata again
            log.warning("transaction markers to broker %d failed (%s: %s); retrying", broker_id,
                        type(exc).__name__, exc)
            return None
        return {(t["name"], p["partition_index"]): p["error_code"] for t in result["topics"] for p in t["partitions"]}

    async def _queued(self, broker_id: int, entry: dict) -> dict:
        """The answer to ``entry`` from another broker: the markers queued for it while a request is in flight go
        together in its next WriteTxnMarkers request (as Kafka's channel drains its per-broker queue)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queues.setdefault(broker_id, []).append((entry, future))
        if broker_id not in self._senders:
            self._senders[broker_id] = loop.create_task(self._drain(broker_id))
        return await future

    async def _drain(self, broker_id: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queues.get(broker_id):
                batch = self._queues.pop(broker_id)
                try:
                    response = await loop.run_in_executor(None, self._request, broker_id,
                                                          {"markers": [entry for entry, _ in batch]})
                    results: list = response["markers"]
                    if len(results) != len(batch):
                        raise ValueError(f"{len(results)} results for {len(batch)} markers")
                except asyncio.CancelledError:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(MarkerChannelClosed("the marker channel is shut down"))
                    raise
                except Exception as exc:  # every marker of the request is retried by its writer
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), result in zip(batch, results):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._senders.pop(broker_id, None)

    def _request(self, broker_id: int, body: dict) -> dict:
        """(On a thread.) One WriteTxnMarkers round trip over the cached connection to ``broker_id``."""
        endpoint = self._endpoint(broker_id)
        if endpoint is None:
            raise ConnectionError(f"broker {broker_id} is not live")
        cached = self._connections.get(broker_id)
        if cached is not None and (cached[0].host, cached[0].port) != (endpoint.host, endpoint.port):
            cached[0].close()
            cached = None
        if cached is None:
            cached = self._connections[broker_id] = (BrokerConnection(
                endpoint.host, endpoint.port, client_id=f"broker-{self.broker_id}-txn-markers",
                timeout_s=self._timeout_s, node_id=broker_id, security=self._security), threading.Lock())
        connection, lock = cached
        with lock:
            try:
                if not connection.connected:
                    connection.connect()
                return connection.request(ApiKey.WRITE_TXN_MARKERS, body, version=1)
            except BaseException:
                connection.close()
                raise

    def close(self) -> None:
        """Stop every write in progress at its next round and close the inter-broker connections."""
        self._closed = True
        for sender in list(self._senders.values()):
            sender.cancel()
        for queued in self._queues.values():
            for _, future in queued:
                if not future.done():
                    future.set_exception(MarkerChannelClosed("the marker channel is shut down"))
        self._queues.clear()
        for connection, lock in list(self._connections.values()):
            with lock:
                connection.close()
        self._connections.clear()


def marker_units(partitions: frozenset[TopicPartition], groups: frozenset[str], offsets_topic: str,
                 offsets_partition: Callable[[str], int]) -> frozenset[MarkerUnit]:
    """The destinations of a transaction's markers: each data partition, and each group's offsets partition."""
    units: set[MarkerUnit] = {(t, p, None) for t, p in partitions if t != offsets_topic}
    units.update((offsets_topic, offsets_partition(g), g) for g in groups)
    return frozenset(units)
