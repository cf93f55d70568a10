"""Producer headers, timestamps, explicit partitions and idempotence bookkeeping, without a broker."""

from __future__ import annotations

import math

import pytest

from pipeline.client.accumulator import RecordAccumulator
from pipeline.client.errors import KafkaConnectionError
from pipeline.client.idempotence import IdempotenceState
from pipeline.client.producer import MessageSizeTooLargeError, ProducerData, _TopicState
from pipeline.client.producer_config import ProducerConfig
from pipeline.client.sender import ProducerBatch, Sender
from pipeline.config import ConfigError
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.records import decode_batch, decode_records
from tests.unit.pipeline.client.test_producer import BROKERS, FakeClock, _offline_producer


def test_producer_data_stays_positional_and_checks_its_extras() -> None:
    plain = ProducerData("t", b"k", [b"a", b"b"])
    assert (plain.partition, plain.timestamps, plain.headers) == (None, None, None)
    data = ProducerData("t", None, [b"a", b"b"], partition=3, timestamps=5,
                        headers=[{"h": bytearray(b"v")}, None])
    assert data.timestamps == [5, 5]
    assert data.headers == [[("h", b"v")], None]
    assert ProducerData("t", None, [b"a"], headers=[[]]).headers is None
    for bad, message in [({"partition": -1}, "partition must be an int >= 0"),
                         ({"partition": True}, "partition must be an int >= 0"),
                         ({"timestamps": [1]}, "1 timestamps for 2 messages"),
                         ({"timestamps": [1, -2]}, "a timestamp must be an int >= 0"),
                         ({"headers": [None]}, "1 header lists for 2 messages"),
                         ({"headers": [[("h", "text")], None]}, "the value must be bytes or None"),
                         ({"headers": [[(b"h", b"v")], None]}, "a header name must be a str"),
                         ({"headers": [["h"], None]}, r"a header must be a \(str, bytes \| None\) pair")]:
        with pytest.raises(ValueError, match=message):
            ProducerData("t", None, [b"a", b"b"], **bad)


def test_split_batches_keep_timestamps_and_headers_with_their_messages() -> None:
    producer = _offline_producer(**{"max.request.size": 2000, "compression.codec": "none"})
    values = [bytes([65 + i]) * 300 for i in range(20)]
    headers = [[("i", b"%d" % i)] if i % 2 else None for i in range(20)]
    batches = producer._batches(ProducerData("t", b"k", values, partition=1, timestamps=list(range(100, 120)),
                                             headers=headers))
    assert len(batches) > 2 and {b.partition for b in batches} == {1}
    records = [r for b in batches for r in decode_records(b.records)[0]]
    assert [(r.value, r.timestamp, r.headers) for r in records] == [
        (values[i], 100 + i, tuple(headers[i] or ())) for i in range(20)]
    assert [m for b in batches for m in b.messages] == values
    producer.close()


def test_a_message_too_large_counts_its_headers() -> None:
    producer = _offline_producer(**{"max.request.size": 1000})
    with pytest.raises(MessageSizeTooLargeError):
        producer._batches(ProducerData("t", None, [b"small"], headers=[[("big", b"x" * 1000)]]))
    producer.close()


def test_async_send_counts_headers_against_the_limit_exactly() -> None:
    producer = _offline_producer(**{"max.request.size": 1000, "producer.type": "async", "queue.time": 60000})
    producer._topics["t"] = _TopicState(4, math.inf)
    with pytest.raises(MessageSizeTooLargeError):
        producer.send(ProducerData("t", None, [b"small"], headers=[[("big", b"x" * 1000)]]))
    with pytest.raises(MessageSizeTooLargeError):
        producer.send(ProducerData("t", None, [b"small"], headers=[[("\u00e9" * 300, b"x" * 400)]]))
    # Past the quick upper bound but within the exact size: accepted.
    producer.send(ProducerData("t", None, [b"v" * 100], headers=[[("n" * 200, b"x" * 550)]]))
    assert producer._accumulator.queued == 1
    producer._accumulator.abort()
    producer.close()


def test_accumulator_fills_in_timestamps_and_headers_of_messages_without() -> None:
    accumulator = RecordAccumulator(batch_size=4, linger_s=60.0, max_messages=100, enqueue_timeout_ms=0,
                                    clock=FakeClock())
    accumulator.append("t", 0, None, [b"a"], ["A"])
    accumulator.append("t", 0, b"k", [b"b", b"c", b"d", b"e"], ["B", "C", "D", "E"], [7, 8, 9, 10],
                       [[("h", b"1")], None, None, [("h", b"4")]])
    accumulator.append("t", 0, None, [b"f"], ["F"])
    accumulator.begin_flush()
    full, last = accumulator.drain()
    assert full.values == [b"a", b"b", b"c", b"d"] and full.messages == ["A", "B", "C", "D"]
    assert full.timestamps[1:] == [7, 8, 9] and full.timestamps[0] > 10**12
    assert full.headers == [None, [("h", b"1")], None, None]
    assert last.values == [b"e", b"f"] and last.keys == [b"k", None]
    assert last.timestamps[0] == 10 and last.timestamps[1] > 10**12
    assert last.headers == [[("h", b"4")], None]


def _numbering_sender() -> tuple[Sender, IdempotenceState]:
    state = IdempotenceState(None, retries=0, retry_backoff_s=0.0)  # type: ignore[arg-type]
    state.producer_id, state.epoch = 42, 3  # as if InitProducerId had answered
    return Sender(None, client_id="c", acks=-1, timeout_ms=1, retries=1,  # type: ignore[arg-type]
                  retry_backoff_s=0.0, idempotence=state), state


def test_batches_are_numbered_when_first_sent_and_keep_their_numbers() -> None:
    producer = _offline_producer(**{"max.request.size": 2000, "compression.codec": "none"})
    batches = [b for data in (ProducerData("t", None, [b"x" * 300] * 10, partition=0),
                              ProducerData("t", None, [b"y"] * 3, partition=0),
                              ProducerData("t", None, [b"z"] * 2, partition=1)) for b in producer._batches(data)]
    producer.close()
    assert {decode_batch(b.records)[0].producer_id for b in batches} == {-1}
    sender, state = _numbering_sender()
    sender._number(state, batches)
    headers = [decode_batch(b.records)[0] for b in batches]  # checks every CRC, recomputed after numbering
    assert {(h.producer_id, h.producer_epoch) for h in headers} == {(42, 3)}
    assert [h.base_sequence for h in headers] == [b.base_sequence for b in batches]
    zero = [(b.base_sequence, b.count) for b in batches if b.partition == 0]
    assert len(zero) > 2 and zero[0][0] == 0
    assert all(seq == prev_seq + prev_count for (prev_seq, prev_count), (seq, _) in zip(zero, zero[1:]))
    assert [(b.base_sequence, b.count) for b in batches if b.partition == 1] == [(0, 2)]
    assert [r.value for r in decode_records(batches[-1].records)[0]] == [b"z", b"z"]
    # A retry sends the same bytes: the numbers do not move, and the next batch continues after them.
    retried = [b.records for b in batches]
    sender._number(state, batches)
    assert [b.records for b in batches] == retried
    assert state.sequence("t", 0) == 13 and state.sequence("t", 1) == 2


def test_sequences_wrap_at_int32_max() -> None:
    state = IdempotenceState(None, retries=0, retry_backoff_s=0.0)  # type: ignore[arg-type]
    state.advance("t", 0, 0x7FFFFFFF)
    assert state.sequence("t", 0) == 0x7FFFFFFF
    state.advance("t", 0, 3)
    assert state.sequence("t", 0) == 2
    state.reset()
    assert state.sequence("t", 0) == 0 and state.producer_id == -1


def _failure(topic: str, partition: int, error: BaseException) -> tuple[ProducerBatch, BaseException]:
    return ProducerBatch(topic, partition, None, [], b"", 1), error


@pytest.mark.parametrize("idempotent", [True, False])
def test_out_of_order_behind_a_retried_batch_is_retried(idempotent: bool) -> None:
    sender = _numbering_sender()[0] if idempotent else Sender(
        None, client_id="c", acks=-1, timeout_ms=1, retries=1, retry_backoff_s=0.0)  # type: ignore[arg-type]
    out_of_order = KafkaProtocolError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    failures = [_failure("t", 0, KafkaConnectionError("lost")), _failure("t", 0, out_of_order),
                _failure("t", 1, out_of_order), _failure("t", 2, KafkaProtocolError(ErrorCode.MESSAGE_TOO_LARGE)),
                _failure("t", 2, out_of_order)]
    retried = [(b.partition, e) for b, e in sender._retriable(failures)]
    if idempotent:
        assert retried == [(0, failures[0][1]), (0, out_of_order)]
    else:
        assert retried == [(0, failures[0][1])]


@pytest.mark.parametrize("values, message", [
    ({"acks": 1}, "needs request.required.acks"),
    ({"request.required.acks": 0}, "needs request.required.acks"),
    ({"retries": 0}, "needs message.send.max.retries"),
    ({"max.in.flight.requests.per.connection": 6}, "up to 5"),
])
def test_idempotence_config_rules(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig({**BROKERS, "enable.idempotence": "true", **values})


def test_idempotence_sets_acks_all_when_not_given() -> None:
    assert ProducerConfig({**BROKERS, "enable.idempotence": "true"}).acks == -1
    assert ProducerConfig({**BROKERS, "enable.idempotence": True, "acks": "all"}).acks == -1
    assert ProducerConfig(BROKERS).acks == 0
