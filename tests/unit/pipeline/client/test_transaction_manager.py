"""The client's TransactionManager against a scripted coordinator: states, retries, error classes."""

from __future__ import annotations

import pytest

from pipeline.client.errors import (
    KafkaConnectionError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionStateError,
)
from pipeline.client.transaction_manager import TransactionManager, TransactionState
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError

S = TransactionState


class FakeCluster:
    client_id = "test"
    security = None

    def brokers(self) -> dict[int, tuple[str, int]]:
        return {1: ("b1", 1), 2: ("b2", 2)}

    def refresh(self, topics) -> None:
        pass

    def invalidate(self, node_id=None) -> None:
        pass


class FakeBrokers:
    """Every broker's answers: FindCoordinator names ``coordinator``; the other APIs answer from ``script``
    (a list of error codes per API, consumed in order; NONE once empty). ``requests`` records (host, api, body)."""

    def __init__(self) -> None:
        self.coordinator = ("b2", 2)
        self.group_coordinator = ("b1", 1)
        self.script: dict[int, list] = {}
        self.requests: list[tuple[str, int, dict]] = []
        self.next_pid = 7000
        self.epoch = -1

    def connect(self, host: str, port: int, node_id: int) -> "FakeConnection":
        return FakeConnection(self, host)

    def codes(self, api: int) -> list:
        return self.script.setdefault(api, [])

    def answer(self, host: str, api: int, body: dict) -> dict:
        self.requests.append((host, api, body))
        if api == ApiKey.FIND_COORDINATOR:
            host, port = self.coordinator if body["key_type"] == 1 else self.group_coordinator
            return {"error_code": 0, "node_id": port, "host": host, "port": port}
        codes = self.codes(api)
        code = codes.pop(0) if codes else ErrorCode.NONE
        if isinstance(code, BaseException):
            raise code
        if api == ApiKey.INIT_PRODUCER_ID:
            self.epoch += 1
            return {"error_code": code, "producer_id": self.next_pid, "producer_epoch": self.epoch}
        if api == ApiKey.ADD_PARTITIONS_TO_TXN:
            return {"results": [{"name": t["name"], "results": [
                {"partition_index": p, "partition_error_code": code} for p in t["partitions"]]} for t in body["topics"]]}
        if api == ApiKey.TXN_OFFSET_COMMIT:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]]}
                for t in body["topics"]]}
        return {"error_code": code}

    def sent(self, api: int) -> list[tuple[str, dict]]:
        return [(host, body) for host, a, body in self.requests if a == api]


class FakeConnection:
    def __init__(self, brokers: FakeBrokers, host: str) -> None:
        self.brokers = brokers
        self.host = host
        self.closed = False

    def request(self, api: int, body: dict) -> dict:
        return self.brokers.answer(self.host, api, body)

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def brokers() -> FakeBrokers:
    return FakeBrokers()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def manager(brokers: FakeBrokers, clock: Clock) -> TransactionManager:
    return TransactionManager(FakeCluster(), "tx-1", transaction_timeout_ms=30000, retries=10, retry_backoff_s=0.1,
                              sleep=clock.sleep, clock=clock, connect=brokers.connect)


def ready(brokers: FakeBrokers, clock: Clock) -> TransactionManager:
    m = manager(brokers, clock)
    m.init_transactions(deadline=60)
    return m


def test_init_finds_the_coordinator_and_takes_producer_id_and_epoch(brokers, clock) -> None:
    brokers.codes(ApiKey.INIT_PRODUCER_ID).extend([ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_COORDINATOR])
    m = manager(brokers, clock)
    assert m.state is S.UNINITIALIZED
    m.init_transactions(deadline=60)
    assert m.state is S.READY
    assert (m.producer_id, m.epoch) == (7000, 2)
    inits = brokers.sent(ApiKey.INIT_PRODUCER_ID)
    assert [host for host, _ in inits] == ["b2"] * 3
    assert inits[0][1]["transactional_id"] == "tx-1" and inits[0][1]["transaction_timeout_ms"] == 30000
    # NOT_COORDINATOR made it ask FindCoordinator again; CONCURRENT_TRANSACTIONS did not.
    assert len(brokers.sent(ApiKey.FIND_COORDINATOR)) == 2
    assert clock.now > 0


def test_init_gives_up_at_the_deadline_and_can_be_called_again(brokers, clock) -> None:
    brokers.codes(ApiKey.INIT_PRODUCER_ID).extend([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 100)
    m = manager(brokers, clock)
    with pytest.raises(TimeoutError):
        m.init_transactions(deadline=2.0)
    assert m.state is S.INITIALIZING
    brokers.codes(ApiKey.INIT_PRODUCER_ID).clear()
    m.init_transactions(deadline=clock.now + 2.0)
    assert m.state is S.READY


@pytest.mark.parametrize("code, error", [(ErrorCode.PRODUCER_FENCED, ProducerFencedError),
                                         (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TransactionFatalError),
                                         (ErrorCode.INVALID_TRANSACTION_TIMEOUT, TransactionFatalError)])
def test_init_refusals_are_fatal(brokers, clock, code, error) -> None:
    brokers.codes(ApiKey.INIT_PRODUCER_ID).append(code)
    m = manager(brokers, clock)
    with pytest.raises(error):
        m.init_transactions(deadline=60)
    assert m.state is S.FATAL_ERROR
    with pytest.raises(TransactionFatalError):
        m.begin_transaction()


def test_calls_out_of_order_are_state_errors(brokers, clock) -> None:
    m = manager(brokers, clock)
    with pytest.raises(TransactionStateError, match="init_transactions"):
        m.begin_transaction()
    with pytest.raises(TransactionStateError):
        m.check_can_send()
    with pytest.raises(TransactionStateError):
        m.ensure_producer_id()
    m.init_transactions(deadline=60)
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        m.check_can_send()
    with pytest.raises(TransactionStateError):
        m.begin_commit()
    m.begin_transaction()
    with pytest.raises(TransactionStateError):
        m.begin_transaction()
    m.check_can_send()


def test_partitions_are_added_once_per_transaction_in_one_request(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.prepare_send({("a", 0), ("a", 1), ("b", 0)}, deadline=60)
    m.prepare_send({("a", 0), ("b", 0)}, deadline=60)
    adds = brokers.sent(ApiKey.ADD_PARTITIONS_TO_TXN)
    assert len(adds) == 1
    assert adds[0][1]["topics"] == [{"name": "a", "partitions": [0, 1]}, {"name": "b", "partitions": [0]}]
    assert (adds[0][1]["producer_id"], adds[0][1]["producer_epoch"]) == (7000, 0)
    m.begin_commit()
    m.commit(deadline=60)
    assert m.state is S.READY
    (end,) = brokers.sent(ApiKey.END_TXN)
    assert end[1]["committed"] is True and end[0] == "b2"
    m.begin_transaction()
    m.prepare_send({("a", 0)}, deadline=60)
    assert len(brokers.sent(ApiKey.ADD_PARTITIONS_TO_TXN)) == 2


def test_add_partitions_retries_concurrent_transactions_and_unknown_partitions(brokers, clock) -> None:
    brokers.codes(ApiKey.ADD_PARTITIONS_TO_TXN).extend(
        [ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, KafkaConnectionError("reset")])
    m = ready(brokers, clock)
    m.begin_transaction()
    m.prepare_send({("a", 0)}, deadline=60)
    assert m.partitions_in_transaction == {("a", 0)}
    assert len(brokers.sent(ApiKey.ADD_PARTITIONS_TO_TXN)) == 4


def test_a_transaction_without_data_or_offsets_commits_without_end_txn(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.begin_commit()
    m.commit(deadline=60)
    assert m.state is S.READY
    assert brokers.sent(ApiKey.END_TXN) == []


def test_send_offsets_adds_the_group_then_commits_at_the_group_coordinator(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.send_offsets({("in", 1): 42, ("in", 0): 10}, "g1", {("in", 0): "meta"}, deadline=60)
    ((host, add),) = brokers.sent(ApiKey.ADD_OFFSETS_TO_TXN)
    assert host == "b2" and add["group_id"] == "g1" and add["producer_id"] == 7000
    ((host, commit),) = brokers.sent(ApiKey.TXN_OFFSET_COMMIT)
    assert host == "b1"
    assert commit["group_id"] == "g1" and commit["transactional_id"] == "tx-1"
    assert commit["topics"] == [{"name": "in", "partitions": [
        {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": -1, "committed_metadata": "meta"},
        {"partition_index": 1, "committed_offset": 42, "committed_leader_epoch": -1, "committed_metadata": ""}]}]
    # Offsets alone start the transaction: the commit needs EndTxn.
    m.begin_commit()
    m.commit(deadline=60)
    assert len(brokers.sent(ApiKey.END_TXN)) == 1


def test_group_refusing_offsets_makes_the_transaction_abortable(brokers, clock) -> None:
    brokers.codes(ApiKey.TXN_OFFSET_COMMIT).extend([ErrorCode.NOT_COORDINATOR, ErrorCode.GROUP_AUTHORIZATION_FAILED])
    m = ready(brokers, clock)
    m.begin_transaction()
    with pytest.raises(TransactionAbortableError):
        m.send_offsets({("in", 0): 1}, "g1", None, deadline=60)
    assert m.state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError):
        m.begin_commit()
    m.begin_abort()
    m.abort(deadline=60)
    assert m.state is S.READY
    assert brokers.sent(ApiKey.END_TXN)[-1][1]["committed"] is False


def test_a_failed_send_makes_commit_impossible_and_abort_bumps_the_epoch(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.prepare_send({("a", 0)}, deadline=60)
    m.advance("a", 0, 5)
    failure = KafkaProtocolError(ErrorCode.REQUEST_TIMED_OUT, "producing")
    m.on_send_failures([(object(), failure)], unknown_outcome=True)
    assert m.state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError) as raised:
        m.check_can_send()
    assert raised.value.cause is failure
    with pytest.raises(TransactionAbortableError):
        m.prepare_send({("b", 0)}, deadline=60)
    m.begin_abort()
    m.abort(deadline=60)
    assert m.state is S.READY
    # The broker may hold records we numbered: a new epoch, numbered from 0.
    assert m.epoch == 1 and m.sequence("a", 0) == 0
    assert len(brokers.sent(ApiKey.INIT_PRODUCER_ID)) == 2


def test_abort_without_a_failed_send_keeps_epoch_and_sequences(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.prepare_send({("a", 0)}, deadline=60)
    m.advance("a", 0, 5)
    m.begin_abort()
    with pytest.raises(TransactionAbortableError, match="aborted"):
        m.prepare_send({("a", 0)}, deadline=60)
    m.abort(deadline=60)
    assert m.state is S.READY and m.epoch == 0 and m.sequence("a", 0) == 5


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
def test_fenced_anywhere_is_fatal(brokers, clock, code) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    brokers.codes(ApiKey.ADD_PARTITIONS_TO_TXN).append(code)
    with pytest.raises(ProducerFencedError):
        m.prepare_send({("a", 0)}, deadline=60)
    assert m.state is S.FATAL_ERROR
    with pytest.raises(TransactionFatalError):
        m.begin_abort()

    m2 = ready(brokers, clock)
    m2.begin_transaction()
    m2.on_send_failures([(object(), KafkaProtocolError(code))], unknown_outcome=True)
    assert m2.state is S.FATAL_ERROR

    m3 = ready(brokers, clock)
    m3.begin_transaction()
    m3.prepare_send({("a", 0)}, deadline=60)
    brokers.codes(ApiKey.END_TXN).append(code)
    m3.begin_commit()
    with pytest.raises(ProducerFencedError):
        m3.commit(deadline=60)


def test_commit_that_times_out_can_be_retried(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.prepare_send({("a", 0)}, deadline=60)
    brokers.codes(ApiKey.END_TXN).extend([ErrorCode.COORDINATOR_NOT_AVAILABLE] * 50)
    m.begin_commit()
    with pytest.raises(TimeoutError):
        m.commit(deadline=clock.now + 1)
    assert m.state is S.COMMITTING_TRANSACTION
    brokers.codes(ApiKey.END_TXN).clear()
    m.begin_commit()
    m.commit(deadline=clock.now + 10)
    assert m.state is S.READY


def test_unknown_end_txn_refusal_is_fatal(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.prepare_send({("a", 0)}, deadline=60)
    brokers.codes(ApiKey.END_TXN).append(ErrorCode.INVALID_TXN_STATE)
    m.begin_commit()
    with pytest.raises(TransactionFatalError):
        m.commit(deadline=60)
    assert m.state is S.FATAL_ERROR


def test_producing_not_authorized_for_the_transactional_id_is_fatal(brokers, clock) -> None:
    m = ready(brokers, clock)
    m.begin_transaction()
    m.on_send_failures([(object(), KafkaProtocolError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))], True)
    assert m.state is S.FATAL_ERROR
    with pytest.raises(TransactionFatalError):
        m.check_can_send()
