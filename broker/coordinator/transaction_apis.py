"""TransactionApis: the transaction coordinator's requests (InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions, and FindCoordinator for key
type 1) decoded by KafkaApis, answered by the TransactionCoordinator.

This layer checks ACLs and adapts versions: PRODUCER_FENCED exists from InitProducerId v4 and AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn v2 (KIP-588); older versions get INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.transaction_metadata import TransactionState
from broker.metadata import BrokerEndpoint
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import RequestHeader
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import COORDINATOR_KEY_TYPE_TRANSACTION
from pipeline.security.acl import AclOperation, ResourceType

Handler = Callable[[RequestHeader, dict], Any]
Authorize = Callable[..., bool]
#: FindCoordinator's KeyType of a transactional id.
_WRITE, _READ, _DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE
_TXN, _TOPIC, _GROUP = ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC, ResourceType.GROUP
_STATE_NAMES = frozenset(s.value for s in TransactionState)
# The first version of each API that knows PRODUCER_FENCED.
_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                 ApiKey.END_TXN: 2}


def _allow_all(operation: AclOperation, resource_type: ResourceType, name: str = "", count: bool = True) -> bool:
    return True


def _versioned(header: RequestHeader, code: int) -> int:
    if code == ErrorCode.PRODUCER_FENCED and header.api_version < _FENCED_SINCE[header.api_key]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


class TransactionApis:
    """The transaction handlers of one broker; ``find_coordinator(id)`` is the coordinator's endpoint, or None
    while there is none."""

    def __init__(self, coordinator: TransactionCoordinator,
                 find_coordinator: Callable[[str], BrokerEndpoint | None]) -> None:
        self.coordinator = coordinator
        self._find = find_coordinator
        # Set by KafkaApis: the authorization check and the listener of the request being dispatched.
        self.request_check: Callable[[], Authorize] = lambda: _allow_all
        self.listener_name: Callable[[], str | None] = lambda: None

    def handlers(self, others: dict[int, Handler]) -> dict[int, Handler]:
        """This part's handlers; FindCoordinator for groups and InitProducerId without a transactional id go on to
        ``others``' (the group coordinator's, the idempotent producer's)."""
        find_group, init_idempotent = others[ApiKey.FIND_COORDINATOR], others[ApiKey.INIT_PRODUCER_ID]

        def find_coordinator(header: RequestHeader, request: dict) -> Any:
            if request.get("key_type", 0) == COORDINATOR_KEY_TYPE_TRANSACTION:
                return self.handle_find_coordinator(header, request)
            return find_group(header, request)

        def init_producer_id(header: RequestHeader, request: dict) -> Any:
            if request.get("transactional_id") is None:
                return init_idempotent(header, request)
            return self.handle_init_producer_id(header, request)

        return {
            ApiKey.FIND_COORDINATOR: find_coordinator,
            ApiKey.INIT_PRODUCER_ID: init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
        }

    # -- FindCoordinator (key type 1) ---------------------------------------------------------------

    def handle_find_coordinator(self, header: RequestHeader, request: dict) -> dict:
        key = request["key"]
        if not key:
            return _no_coordinator(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        if not self.request_check()(_DESCRIBE, _TXN, key):
            return _no_coordinator(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                   "not authorized to describe the transactional id")
        endpoint = self._find(key)
        if endpoint is not None:
            endpoint = endpoint.on(self.listener_name())
        if endpoint is None:
            return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no live broker can coordinate the id now")
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
                "node_id": endpoint.broker_id, "host": endpoint.host, "port": endpoint.port}

    # -- InitProducerId ---------------------------------------------------------------------------------

    def handle_init_producer_id(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        transactional_id = request["transactional_id"]
        if transactional_id == "":
            return _init_answer(ErrorCode.INVALID_REQUEST)
        if not self.request_check()(_WRITE, _TXN, transactional_id):
            return _init_answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return self._init_producer_id(header, request)

    async def _init_producer_id(self, header: RequestHeader, request: dict) -> dict:
        producer_id, epoch = request.get("producer_id", -1), request.get("producer_epoch", -1)
        expected = (producer_id, epoch) if producer_id != -1 or epoch != -1 else None
        code, producer_id, epoch = await self.coordinator.init_producer_id(
            request["transactional_id"], request["transaction_timeout_ms"], expected)
        return _init_answer(_versioned(header, code), producer_id, epoch)

    # -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn -----------------------------------------------------

    def handle_add_partitions_to_txn(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        check = self.request_check()
        wanted = {(t["name"], p) for t in request["topics"] for p in t["partitions"]}
        if not check(_WRITE, _TXN, request["transactional_id"]):
            return _partition_results(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        refused = {t["name"] for t in request["topics"] if not check(_WRITE, _TOPIC, t["name"])}
        if refused:
            results = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in refused
                       else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}
            return _partition_results(wanted, results)
        return self._add_partitions(header, request, wanted)

    async def _add_partitions(self, header: RequestHeader, request: dict, wanted: set[tuple[str, int]]) -> dict:
        code = await self.coordinator.add_partitions(request["transactional_id"], request["producer_id"],
                                                     request["producer_epoch"], wanted)
        return _partition_results(wanted, _versioned(header, code))

    def handle_add_offsets_to_txn(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        check = self.request_check()
        if not check(_WRITE, _TXN, request["transactional_id"]):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        if not check(_READ, _GROUP, request["group_id"]):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        return self._add_offsets(header, request)

    async def _add_offsets(self, header: RequestHeader, request: dict) -> dict:
        code = await self.coordinator.add_offsets(request["transactional_id"], request["producer_id"],
                                                  request["producer_epoch"], request["group_id"])
        return {"throttle_time_ms": 0, "error_code": _versioned(header, code)}

    def handle_end_txn(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if not self.request_check()(_WRITE, _TXN, request["transactional_id"]):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        return self._end_txn(header, request)

    async def _end_txn(self, header: RequestHeader, request: dict) -> dict:
        code = await self.coordinator.end_transaction(request["transactional_id"], request["producer_id"],
                                                      request["producer_epoch"], request["committed"])
        return {"throttle_time_ms": 0, "error_code": _versioned(header, code)}

    # -- DescribeTransactions, ListTransactions ----------------------------------------------------------

    def handle_describe_transactions(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        check = self.request_check()
        return self._describe([(t, check(_DESCRIBE, _TXN, t)) for t in request["transactional_ids"]])

    async def _describe(self, ids: list[tuple[str, bool]]) -> dict:
        states = []
        for transactional_id, allowed in ids:
            code, metadata = (await self.coordinator.describe(transactional_id) if allowed
                              else (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None))
            if metadata is None:
                states.append({"error_code": code, "transactional_id": transactional_id, "transaction_state": "",
                               "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                               "producer_epoch": -1, "topics": []})
                continue
            states.append({"error_code": code, "transactional_id": transactional_id,
                           "transaction_state": metadata.state.value, "transaction_timeout_ms": metadata.timeout_ms,
                           "transaction_start_time_ms": metadata.start_time_ms, "producer_id": metadata.producer_id,
                           "producer_epoch": metadata.producer_epoch,
                           "topics": [{"topic": t, "partitions": p} for t, p in metadata.topics().items()]})
        return {"throttle_time_ms": 0, "transaction_states": states}

    def handle_list_transactions(self, header: RequestHeader, request: dict) -> dict:
        check = self.request_check()
        wanted_states = set(request.get("state_filters") or ())
        unknown = sorted(wanted_states - _STATE_NAMES)
        producer_ids = set(request.get("producer_id_filters") or ())
        min_duration = request.get("duration_filter", -1)
        code, listed = self.coordinator.list()
        now = self.coordinator.metrics.now_ms()
        states = []
        for metadata in listed:
            if wanted_states and metadata.state.value not in wanted_states:
                continue
            if producer_ids and metadata.producer_id not in producer_ids:
                continue
            if min_duration >= 0 and (metadata.start_time_ms < 0 or now - metadata.start_time_ms < min_duration):
                continue
            if not check(_DESCRIBE, _TXN, metadata.transactional_id, count=False):
                continue
            states.append({"transactional_id": metadata.transactional_id, "producer_id": metadata.producer_id,
                           "transaction_state": metadata.state.value})
        return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": unknown,
                "transaction_states": states}


def _init_answer(code: int, producer_id: int = -1, epoch: int = -1) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


def _partition_results(wanted: set[tuple[str, int]], codes: int | dict[tuple[str, int], int]) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in sorted(wanted):
        code = codes if isinstance(codes, int) else codes[(topic, partition)]
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return {"throttle_time_ms": 0, "results": [{"name": t, "results": r} for t, r in by_topic.items()]}


def _no_coordinator(code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
