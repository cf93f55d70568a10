"""The AdminClient's transaction calls (Kafka's Admin listTransactions and describeTransactions).

ListTransactions goes to every live broker (each lists the transactional ids it coordinates) and the answers
are merged; DescribeTransactions goes to the coordinator of each transactional id, found with FindCoordinator
(key type 1) and asked again when it moved or is loading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from pipeline.client.cluster import Cluster
from pipeline.client.connection import BrokerConnection
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = ["TransactionCalls", "TransactionDescription", "TransactionListing"]

_COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_KEY_TYPE_TRANSACTION = 1
_RETRY_BACKOFF_S = 0.1

T = TypeVar("T")


@dataclass(frozen=True)
class TransactionListing:
    """A transactional id as ListTransactions names it, with the broker coordinating it."""

    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id's state as its coordinator describes it; ``start_time_ms`` is -1 without an open
    transaction; ``topic_partitions`` the partitions in the current transaction."""

    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int
    topic_partitions: tuple[tuple[str, int], ...]


class TransactionCalls:
    """The transaction calls of AdminClient (mixed into it, with GroupCalls' coordinator lookup)."""

    cluster: Cluster
    timeout_s: float
    _request: Callable[[BrokerConnection, int, dict], dict]
    _with_coordinator: Callable[..., object]

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1) -> list[TransactionListing]:
        """Every transactional id the live brokers coordinate (ListTransactions to each, merged), sorted by id;
        filtered by state names (Kafka's: Empty, Ongoing, PrepareCommit, ...), producer ids, and transactions
        open longer than ``duration_ms`` (-1: no filter)."""
        self.cluster.refresh([])
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                "duration_filter": duration_ms}
        found: dict[str, TransactionListing] = {}
        for node_id in sorted(self.cluster.brokers()):
            deadline = time.monotonic() + self.timeout_s
            while True:
                response = self._request(self.cluster.connection(node_id), ApiKey.LIST_TRANSACTIONS, body)
                code = response["error_code"]
                if code not in _COORDINATOR_ERRORS or time.monotonic() >= deadline:
                    break
                time.sleep(_RETRY_BACKOFF_S)
            if code:
                raise KafkaProtocolError(code, f"broker {node_id} cannot list its transactions")
            for entry in response["transaction_states"]:
                found[entry["transactional_id"]] = TransactionListing(
                    entry["transactional_id"], node_id, entry["producer_id"], entry["transaction_state"])
        return [found[t] for t in sorted(found)]

    def describe_transactions(self, transactional_ids: str | Iterable[str]) -> list[TransactionDescription]:
        """Describe each transactional id (asking its coordinator), in the order given. KafkaProtocolError
        (TRANSACTIONAL_ID_NOT_FOUND) for an id no coordinator knows."""
        ids = [transactional_ids] if isinstance(transactional_ids, str) else list(transactional_ids)
        return [self._describe_transaction(transactional_id) for transactional_id in ids]

    def _describe_transaction(self, transactional_id: str) -> TransactionDescription:
        def call(node_id: int, connection: BrokerConnection) -> TransactionDescription:
            response = self._request(connection, ApiKey.DESCRIBE_TRANSACTIONS,
                                     {"transactional_ids": [transactional_id]})
            (entry,) = [e for e in response["transaction_states"] if e["transactional_id"] == transactional_id]
            if entry["error_code"]:
                raise KafkaProtocolError(entry["error_code"], f"cannot describe transactional id "
                                                              f"{transactional_id!r}")
            partitions = tuple(sorted((topic["topic"], p) for topic in entry["topics"] for p in topic["partitions"]))
            return TransactionDescription(node_id, transactional_id, entry["producer_id"], entry["producer_epoch"],
                                          entry["transaction_state"], entry["transaction_timeout_ms"],
                                          entry["transaction_start_time_ms"], partitions)

        return self._with_coordinator(transactional_id, call, _KEY_TYPE_TRANSACTION)  # type: ignore[return-value]
