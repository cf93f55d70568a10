"""A transactional producer's bookkeeping and coordinator calls (Kafka's TransactionManager, KIP-98).

It extends the idempotent producer's :class:`~pipeline.client.idempotence.IdempotenceState` (producer id, epoch,
sequence numbers) with Kafka's client states::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                                             IN_TRANSACTION -> ABORTING_TRANSACTION   -> READY
    IN_TRANSACTION / COMMITTING_TRANSACTION -> ABORTABLE_ERROR -> ABORTING_TRANSACTION
    any -> FATAL_ERROR (fenced, not authorized, an answer no retry mends)

The transaction coordinator is found with FindCoordinator (key type 1) and asked again after
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or a broken connection;
CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written) is retried after a
backoff. The sender calls :meth:`TransactionManager.prepare_send` before it numbers a send round's batches: a
partition's first batch in a transaction leaves only after AddPartitionsToTxn added the partition (all new
partitions of a round in one request, as Kafka's sender does). A batch that fails inside a transaction makes it
abortable; after the abort, if the broker may hold a sequence the producer no longer knows, InitProducerId
bumps the epoch so that numbering starts again at 0 (what Kafka's producer does since KIP-360).

Coordinator requests go over this manager's own connections (the producer's pooled ones belong to its sender),
one request at a time.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Callable, Iterable, Mapping

from pipeline.client.cluster import Cluster
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import (
    KafkaClientError,
    KafkaConnectionError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
    TransactionStateError,
)
from pipeline.client.idempotence import NO_PRODUCER_ID, IdempotenceState
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.protocol.messages import COORDINATOR_KEY_TYPE_GROUP, COORDINATOR_KEY_TYPE_TRANSACTION

__all__ = ["TransactionManager", "TransactionState"]

#: FindCoordinator's KeyType of a transactional id.

_COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
# Errors no retry or abort mends: the producer must close (Kafka's fatalError cases).
_FATAL = frozenset({ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_TXN_STATE,
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT})
_RETRY = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION, ErrorCode.UNSTABLE_OFFSET_COMMIT})


class TransactionState(enum.Enum):
    """Kafka's client-side transaction states."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


_S = TransactionState
# target -> the states it may be entered from (Kafka's TransactionManager.State.isTransitionValid).
_VALID_FROM: dict[TransactionState, frozenset[TransactionState]] = {
    _S.UNINITIALIZED: frozenset({_S.UNINITIALIZED}),
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.INITIALIZING, _S.ABORTING_TRANSACTION}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING_TRANSACTION: frozenset({_S.IN_TRANSACTION}),
    _S.ABORTING_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.ABORTABLE_ERROR: frozenset({_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.ABORTABLE_ERROR, _S.INITIALIZING}),
    _S.FATAL_ERROR: frozenset(TransactionState),
}

_BACKOFF_CAP_S = 1.0
_CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.02

Partition = tuple[str, int]


class _Refused(Exception):
    """A coordinator's answer that the current call must not retry (carries the error code)."""

    def __init__(self, code: ErrorCode, what: str) -> None:
        super().__init__(f"{what}: {code.name}")
        self.code = code


class TransactionManager(IdempotenceState):
    """The state of one transactional producer; the producer's caller and its sender thread both use it."""

    transactional = True

    def __init__(self, cluster: Cluster, transactional_id: str, *, transaction_timeout_ms: int, retries: int,
                 retry_backoff_s: float, request_timeout_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 connect: Callable[[str, int, int], BrokerConnection] | None = None) -> None:
        super().__init__(cluster, retries=retries, retry_backoff_s=retry_backoff_s, sleep=sleep, clock=clock)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_s = request_timeout_s
        self._connect = connect or self._open_connection
        self._lock = threading.RLock()  # state and sets below
        self._io_lock = threading.Lock()  # one coordinator request at a time
        self.state = TransactionState.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.partitions_in_transaction: set[Partition] = set()
        self._offsets_added = False
        # A batch failed with an unknown outcome in this transaction: bump the epoch after the abort.
        self._epoch_bump_needed = False
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._coordinator: tuple[int, str, int] | None = None

    # -- state --------------------------------------------------------------------------------------

    def _transition(self, target: TransactionState, error: BaseException | None = None) -> None:
        with self._lock:
            if self.state not in _VALID_FROM[target]:
                raise TransactionStateError(f"transactional id {self.transactional_id!r}: cannot go from "
                                            f"{self.state.name} to {target.name}")
            self.state = target
            if error is not None:
                self.last_error = error

    def _fail(self, error: BaseException) -> BaseException:
        """Enter FATAL_ERROR or ABORTABLE_ERROR for ``error`` (as the error class says); the error to raise."""
        with self._lock:
            if isinstance(error, TransactionFatalError):
                self.state = TransactionState.FATAL_ERROR
                self.last_error = error
            elif self.state in _VALID_FROM[TransactionState.ABORTABLE_ERROR]:
                self.state = TransactionState.ABORTABLE_ERROR
                self.last_error = error
        return error

    def _check_not_failed(self) -> None:
        state = self.state
        error = self.last_error
        cause = getattr(error, "cause", None) or error
        if state is TransactionState.FATAL_ERROR:
            kind = ProducerFencedError if isinstance(error, ProducerFencedError) else TransactionFatalError
            raise kind(f"transactional id {self.transactional_id!r} is in a fatal error state: {error}",
                       cause) from error
        if state is TransactionState.ABORTABLE_ERROR:
            raise TransactionAbortableError(f"the transaction of {self.transactional_id!r} must be aborted: "
                                            f"{error}", cause) from error

    def check_can_send(self) -> None:
        """send() is allowed only inside a transaction (Kafka raises IllegalStateException otherwise)."""
        state = self.state
        if state is TransactionState.IN_TRANSACTION:
            return
        self._check_not_failed()
        raise TransactionStateError(f"send() on transactional producer {self.transactional_id!r} outside a "
                                    f"transaction (state {state.name}): call begin_transaction() first")

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    # -- the public operations (on the caller's thread) ----------------------------------------------

    def init_transactions(self, deadline: float) -> None:
        """Find the coordinator and get the producer id and a new epoch for our transactional id (which fences
        and aborts an older instance's open transaction)."""
        with self._lock:
            self._check_not_fatal()
            self._transition(TransactionState.INITIALIZING)
        self._init_producer_id(deadline)
        self._transition(TransactionState.READY)

    def begin_transaction(self) -> None:
        with self._lock:
            self._check_not_failed()
            if self.state is not TransactionState.READY:
                raise TransactionStateError(f"begin_transaction() in state {self.state.name} of "
                                            f"{self.transactional_id!r}" + (
                                                ": call init_transactions() first"
                                                if self.state is TransactionState.UNINITIALIZED else ""))
            self.partitions_in_transaction.clear()
            self._offsets_added = False
            self._transition(TransactionState.IN_TRANSACTION)

    def send_offsets(self, offsets: Mapping[Partition, int], group_id: str,
                     metadata: Mapping[Partition, str] | None, deadline: float) -> None:
        """AddOffsetsToTxn to our coordinator, then TxnOffsetCommit to the group's coordinator."""
        with self._lock:
            self._check_not_failed()
            if self.state is not TransactionState.IN_TRANSACTION:
                raise TransactionStateError(f"send_offsets_to_transaction() outside a transaction (state "
                                            f"{self.state.name})")
        try:
            self._add_offsets(group_id, deadline)
            self._txn_offset_commit(offsets, group_id, metadata or {}, deadline)
        except TimeoutError:
            raise
        except (KafkaClientError, KafkaProtocolError, _Refused) as exc:
            raise self._fail(self._classify(exc, "send_offsets_to_transaction")) from None

    def begin_commit(self) -> None:
        """Before the producer flushes: refuse unless the transaction may commit."""
        with self._lock:
            if self.state is TransactionState.COMMITTING_TRANSACTION:
                return  # a commit that timed out, called again
            self._check_not_failed()
            if self.state is not TransactionState.IN_TRANSACTION:
                raise TransactionStateError(f"commit_transaction() in state {self.state.name}")

    def commit(self, deadline: float) -> None:
        """After the flush: EndTxn(commit), unless a batch of the transaction failed meanwhile."""
        with self._lock:
            if self.state is not TransactionState.COMMITTING_TRANSACTION:
                self._check_not_failed()
                self._transition(TransactionState.COMMITTING_TRANSACTION)
        self._end(True, deadline)

    def begin_abort(self) -> None:
        """Before the producer flushes what is queued: no batch goes out for this transaction any more."""
        with self._lock:
            if self.state is TransactionState.ABORTING_TRANSACTION:
                return
            self._check_not_fatal()
            if self.state not in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
                raise TransactionStateError(f"abort_transaction() in state {self.state.name}")
            self._transition(TransactionState.ABORTING_TRANSACTION)

    def abort(self, deadline: float) -> None:
        """After the flush: EndTxn(abort), then a new epoch if a failed batch left the sequences unknown."""
        self._end(False, deadline)

    def _check_not_fatal(self) -> None:
        if self.state is TransactionState.FATAL_ERROR:
            self._check_not_failed()

    # -- the sender's hooks (on the sender's thread) ----------------------------------------------------

    def ensure_producer_id(self, deadline: float | None = None) -> None:
        """A transactional producer gets its id only from init_transactions()."""
        if self.producer_id == NO_PRODUCER_ID:
            raise TransactionStateError(f"transactional producer {self.transactional_id!r}: call "
                                        "init_transactions() first")

    def prepare_send(self, partitions: Iterable[Partition], deadline: float | None) -> None:
        """Before a send round is numbered: the transaction must be open and each of ``partitions`` added to it
        (AddPartitionsToTxn for the new ones, all in one request). Raises what fails every batch of the round."""
        with self._lock:
            state = self.state
            if state is TransactionState.ABORTING_TRANSACTION:
                raise TransactionAbortedError(f"the transaction of {self.transactional_id!r} is being aborted")
            if state not in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING_TRANSACTION):
                self._check_not_failed()
                raise TransactionStateError(f"no transaction open (state {state.name})")
            new = {p for p in partitions if p not in self.partitions_in_transaction}
        if new:
            try:
                self._add_partitions(sorted(new), deadline)
            except (TimeoutError, KafkaClientError, KafkaProtocolError, _Refused) as exc:
                raise self._fail(self._classify(exc, "AddPartitionsToTxn")) from None

    def on_send_failures(self, failures: list[tuple[object, BaseException]], unknown_outcome: bool) -> None:
        """Batches of the transaction failed for good: it can only abort now; after a failure whose outcome is
        unknown (``unknown_outcome``) the epoch is bumped once it has. Fenced, or not authorized for the
        transactional id, is fatal."""
        for _, exc in failures:
            code = getattr(exc, "code", None)
            if code in _FENCED:
                self._fail(ProducerFencedError(f"transactional id {self.transactional_id!r} was fenced "
                                               f"while producing: {exc}", exc))
                return
            if code in _FATAL:
                self._fail(TransactionFatalError(f"producing failed for good: {exc}", exc))
                return
        with self._lock:
            if unknown_outcome:
                self._epoch_bump_needed = True
            if self.state is not TransactionState.ABORTING_TRANSACTION:
                self._fail(TransactionAbortableError(f"a send of the transaction failed: {failures[0][1]}",
                                                     failures[0][1]))

    def reset(self) -> None:
        """(Idempotent producers take a new id after a failed batch; a transactional one bumps its epoch after
        the abort instead: see on_send_failures.)"""
        with self._lock:
            self._epoch_bump_needed = True

    # -- requests ----------------------------------------------------------------------------------------

    def _init_producer_id(self, deadline: float) -> None:
        body = {"transactional_id": self.transactional_id, "transaction_timeout_ms": self.transaction_timeout_ms,
                "producer_id": self.producer_id, "producer_epoch": self.epoch}

        def answer(response: dict) -> dict:
            code = ErrorCode(response["error_code"])
            if code:
                raise _Refused(code, "InitProducerId")
            return response

        try:
            response = self._coordinator_call(ApiKey.INIT_PRODUCER_ID, body, answer, deadline)
        except TimeoutError:
            raise
        except (KafkaClientError, KafkaProtocolError, _Refused) as exc:
            raise self._fail(self._classify(exc, "InitProducerId", fatal_default=True)) from None
        with self._lock:
            self._sequences.clear()
            self.producer_id = response["producer_id"]
            self.epoch = response["producer_epoch"]
            self._epoch_bump_needed = False

    def _add_partitions(self, partitions: list[Partition], deadline: float | None) -> None:
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        body = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}

        def answer(response: dict) -> None:
            errors = {ErrorCode(r["partition_error_code"]) for t in response["results"] for r in t["results"]}
            errors.discard(ErrorCode.NONE)
            # OPERATION_NOT_ATTEMPTED: another partition's error stopped the request; that one decides.
            errors.discard(ErrorCode.OPERATION_NOT_ATTEMPTED)
            for code in sorted(errors, key=lambda c: (c not in _FENCED and c not in _FATAL, c in _RETRY)):
                raise _Refused(code, f"AddPartitionsToTxn of {partitions}")

        self._coordinator_call(ApiKey.ADD_PARTITIONS_TO_TXN, body, answer, deadline)
        with self._lock:
            self.partitions_in_transaction.update(partitions)

    def _add_offsets(self, group_id: str, deadline: float) -> None:
        body = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "group_id": group_id}

        def answer(response: dict) -> None:
            if response["error_code"]:
                raise _Refused(ErrorCode(response["error_code"]), f"AddOffsetsToTxn of group {group_id!r}")

        self._coordinator_call(ApiKey.ADD_OFFSETS_TO_TXN, body, answer, deadline)
        with self._lock:
            self._offsets_added = True

    def _txn_offset_commit(self, offsets: Mapping[Partition, int], group_id: str,
                           metadata: Mapping[Partition, str], deadline: float) -> None:
        topics: dict[str, list[dict]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1,
                                                 "committed_metadata": metadata.get((topic, partition), "")})
        body = {"transactional_id": self.transactional_id, "group_id": group_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}

        def answer(response: dict) -> None:
            errors = {ErrorCode(p["error_code"]) for t in response["topics"] for p in t["partitions"]}
            errors.discard(ErrorCode.NONE)
            for code in sorted(errors, key=lambda c: (c not in _FENCED and c not in _FATAL, c in _RETRY)):
                raise _Refused(code, f"TxnOffsetCommit of group {group_id!r}")

        self._coordinator_call(ApiKey.TXN_OFFSET_COMMIT, body, answer, deadline, group=group_id)

    def _end(self, committed: bool, deadline: float) -> None:
        what = "commit" if committed else "abort"
        with self._lock:
            started = bool(self.partitions_in_transaction) or self._offsets_added
        if started:
            body = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                    "producer_epoch": self.epoch, "committed": committed}

            def answer(response: dict) -> None:
                if response["error_code"]:
                    raise _Refused(ErrorCode(response["error_code"]), f"EndTxn({what})")

            try:
                self._coordinator_call(ApiKey.END_TXN, body, answer, deadline)
            except TimeoutError:
                raise
            except (KafkaClientError, KafkaProtocolError, _Refused) as exc:
                error = self._classify(exc, f"EndTxn({what})", fatal_default=True)
                if not committed and isinstance(error, TransactionAbortableError):
                    error = TransactionFatalError(str(error), exc)
                raise self._fail(error) from None
        with self._lock:
            self.partitions_in_transaction.clear()
            self._offsets_added = False
            bump = not committed and self._epoch_bump_needed
            if not bump:
                self._transition(TransactionState.READY)
                return
            self._transition(TransactionState.INITIALIZING)
        self._init_producer_id(deadline)
        self._transition(TransactionState.READY)

    def _classify(self, exc: BaseException, what: str, fatal_default: bool = False) -> BaseException:
        """The client error a failed coordinator call means: fenced and fatal codes are fatal; a connection
        error or a timeout abortable; any other refusal abortable (or fatal, with ``fatal_default``)."""
        if isinstance(exc, (TransactionFatalError, TransactionAbortableError, TransactionStateError)):
            return exc
        code = getattr(exc, "code", None)
        if code in _FENCED:
            return ProducerFencedError(f"transactional id {self.transactional_id!r} was fenced by a newer producer "
                                       f"({what}: {code.name})", exc)
        if code in _FATAL or (fatal_default and isinstance(exc, _Refused)):
            return TransactionFatalError(f"{what} failed: {exc}", exc)
        return TransactionAbortableError(f"{what} failed: {exc}", exc)

    # -- coordinators ---------------------------------------------------------------------------------------

    def _coordinator_call(self, api_key: int, body: dict, answer: Callable[[dict], object], deadline: float | None,
                          *, group: str | None = None) -> object:
        """``answer(response)`` of ``body`` sent to our transaction coordinator (or ``group``'s coordinator),
        retried after coordinator errors (found again), connection errors and retriable refusals, with a growing
        backoff, until ``deadline``: then TimeoutError."""
        attempt = 0
        key, key_type = (group, COORDINATOR_KEY_TYPE_GROUP) if group is not None else (
            self.transactional_id, COORDINATOR_KEY_TYPE_TRANSACTION)
        while True:
            last: BaseException
            try:
                with self._io_lock:
                    node = self._find_coordinator(key, key_type) if group is not None or self._coordinator is None \
                        else self._coordinator
                    if group is None:
                        self._coordinator = node
                    connection = self._connection(node[1], node[2], node[0])
                    try:
                        response = connection.request(api_key, body)
                    except KafkaConnectionError:
                        self._drop_connection(node[1], node[2])
                        raise
                return answer(response)
            except _Refused as exc:
                if exc.code in _COORDINATOR_ERRORS:
                    if group is None:
                        self._coordinator = None
                elif exc.code not in _RETRY:
                    raise
                last = exc
            except KafkaProtocolError as exc:
                if exc.code not in _COORDINATOR_ERRORS and not exc.retriable:
                    raise
                if group is None:
                    self._coordinator = None
                last = exc
            except KafkaConnectionError as exc:
                if group is None:
                    self._coordinator = None
                last = exc
            if getattr(last, "code", None) == ErrorCode.CONCURRENT_TRANSACTIONS:
                # The previous transaction's markers are being written: done soon (Kafka's producer retries
                # AddPartitionsToTxn after 20 ms here rather than retry.backoff.ms).
                backoff = min(self.retry_backoff_s, _CONCURRENT_TRANSACTIONS_BACKOFF_S)
            else:
                backoff = min(self.retry_backoff_s * (2 ** min(attempt, 6)), _BACKOFF_CAP_S)
            if deadline is not None and self._clock() + backoff >= deadline:
                raise TimeoutError(f"{ApiKey(api_key).name} for transactional id {self.transactional_id!r} did not "
                                   f"succeed in time: {last}") from last
            attempt += 1
            self._sleep(backoff)

    def _find_coordinator(self, key: str, key_type: int) -> tuple[int, str, int]:
        """(node id, host, port) of the coordinator of ``key`` (FindCoordinator to some broker)."""
        brokers = self.cluster.brokers()
        if not brokers:
            self.cluster.refresh([])
            brokers = self.cluster.brokers()
        errors = []
        for node_id, (host, port) in sorted(brokers.items()):
            try:
                response = self._connection(host, port, node_id).request(
                    ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type})
            except KafkaConnectionError as exc:
                self._drop_connection(host, port)
                errors.append(f"{host}:{port}: {exc}")
                continue
            code = ErrorCode(response["error_code"])
            if code:
                raise _Refused(code, f"FindCoordinator({key!r}, key type {key_type})")
            return response["node_id"], response["host"], response["port"]
        self.cluster.invalidate()
        raise KafkaConnectionError(f"no broker answered FindCoordinator: {'; '.join(errors) or 'none known'}")

    def _open_connection(self, host: str, port: int, node_id: int) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.cluster.client_id, timeout_s=self.request_timeout_s,
                                node_id=node_id, security=self.cluster.security)

    def _connection(self, host: str, port: int, node_id: int) -> BrokerConnection:
        connection = self._connections.get((host, port))
        if connection is None:
            connection = self._connections[(host, port)] = self._connect(host, port, node_id)
        return connection

    def _drop_connection(self, host: str, port: int) -> None:
        connection = self._connections.pop((host, port), None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Close the coordinator connections."""
        with self._io_lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()
