"""Producer.send_batch: the same records, partitions, order and checks as one ProducerData per message."""

from __future__ import annotations

import math
import random

import pytest

from pipeline.client.encoder import StringEncoder
from pipeline.client.producer import CallbackHandler, MessageSizeTooLargeError, Producer, ProducerData, _TopicState
from pipeline.client.sender import ProduceResult, ProducerBatch
from pipeline.records import decode_records

BROKERS = {"metadata.broker.list": "127.0.0.1:1"}
ASYNC = {"producer.type": "async", "queue.time": 60000, "batch.size": 10000, "compression.codec": "none"}


def _producer(**extra: object) -> Producer:
    producer = Producer({**BROKERS, **extra})
    producer._topics["t"] = _TopicState(4, math.inf)
    return producer


def _random_messages(rng: random.Random, n: int) -> tuple[list, list, list, list]:
    values = [None if rng.random() < 0.05 else rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]
    keys = [None if rng.random() < 0.2 else f"k{rng.randrange(6)}".encode() for _ in range(n)]
    stamps = [rng.randrange(0, 2**41) for _ in range(n)]
    headers = [None if rng.random() < 0.5 else [("h", rng.randbytes(3)), ("n", None)] for _ in range(n)]
    return values, keys, stamps, headers


def _queued(producer: Producer) -> dict[int, list[tuple]]:
    """Partition -> (key, value, message, timestamp, headers) of everything queued, in order."""
    out: dict[int, list[tuple]] = {}
    for pending in producer._accumulator.abort():
        n = len(pending.values)
        stamps = pending.timestamps or [None] * n
        headers = pending.headers or [None] * n
        out.setdefault(pending.partition, []).extend(
            zip(pending.keys, pending.values, pending.messages, stamps, headers))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_async_send_batch_queues_what_one_producer_data_per_message_queues(seed: int) -> None:
    rng = random.Random(seed)
    values, keys, stamps, headers = _random_messages(rng, rng.randrange(1, 60))
    explicit = rng.choice([None, 2])
    if explicit is None:  # keyless messages go to one random partition per call: compare the keyed ones
        keys = [k if k is not None else b"fixed" for k in keys]
    with_stamps = rng.random() < 0.5
    with_headers = rng.random() < 0.5
    one_by_one, batched = _producer(**ASYNC), _producer(**ASYNC)
    for i, value in enumerate(values):
        one_by_one.send(ProducerData("t", keys[i], [value], partition=explicit,
                                     timestamps=[stamps[i]] if with_stamps else None,
                                     headers=[headers[i]] if with_headers else None))
    batched.send_batch("t", values, keys=keys, partition=explicit, timestamps=stamps if with_stamps else None,
                       headers=headers if with_headers else None)
    expected, got = _queued(one_by_one), _queued(batched)
    if not with_stamps:  # the time each was queued
        expected = {p: [r[:3] + r[4:] for r in rs] for p, rs in expected.items()}
        got = {p: [r[:3] + r[4:] for r in rs] for p, rs in got.items()}
    assert got == expected
    one_by_one.close()
    batched.close()


def test_keyless_messages_of_one_call_go_together_to_one_partition() -> None:
    producer = _producer(**ASYNC)
    producer.send_batch("t", [b"a", b"b", b"c"], keys=[None, b"k", None])
    queued = _queued(producer)
    keyless = [p for p, rs in queued.items() for r in rs if r[0] is None]
    assert len(keyless) == 2 and len(set(keyless)) == 1
    producer.close()


def test_sync_send_batch_sends_the_same_records_per_partition() -> None:
    producer = _producer(**{"compression.codec": "none", "serializer.class": StringEncoder(),
                            "key.serializer.class": StringEncoder()})
    sent: list[ProducerBatch] = []
    producer._sender.send = lambda batches: (sent.extend(batches), ([], []))[1]  # type: ignore[method-assign]
    messages = [f"m{i}" for i in range(30)]
    keys = [f"user-{i % 5}" for i in range(30)]
    producer.send_batch("t", messages, keys=keys, timestamps=7, headers=[[("i", str(i).encode())] for i in range(30)])
    expected = {}
    for i, message in enumerate(messages):
        [batch] = producer._batches(ProducerData("t", keys[i], [message]))
        expected.setdefault(batch.partition, []).append((keys[i].encode(), message.encode(), 7, (("i", str(i).encode()),)))
    got = {}
    for batch in sent:
        records, _ = decode_records(batch.records)
        got.setdefault(batch.partition, []).extend((r.key, r.value, r.timestamp, r.headers) for r in records)
        assert batch.messages == [m for m in messages if m.encode() in {r.value for r in records}]
    assert got == expected
    assert producer.sent_messages == 30
    producer.close()


def test_send_batch_checks_like_send() -> None:
    producer = _producer(**{**ASYNC, "max.request.size": 1000})
    with pytest.raises(MessageSizeTooLargeError):
        producer.send_batch("t", [b"small", b"x" * 2000])
    with pytest.raises(MessageSizeTooLargeError):
        producer.send_batch("t", [b"small"], headers=[[("big", b"x" * 1000)]])
    with pytest.raises(ValueError, match="2 keys for 1 messages"):
        producer.send_batch("t", [b"a"], keys=[b"a", b"b"])
    with pytest.raises(ValueError, match="timestamps"):
        producer.send_batch("t", [b"a"], timestamps=[1, 2])
    with pytest.raises(ValueError, match="partition"):
        producer.send_batch("t", [b"a"], partition=-1)
    assert producer._accumulator.queued == 0
    producer.send_batch("t", [])
    producer.close()


def test_a_batch_longer_than_the_queue_goes_in_pieces_and_on_enqueue_sees_each_partition() -> None:
    seen: list[ProducerData] = []

    class Handler(CallbackHandler):
        def on_enqueue(self, data: ProducerData) -> None:
            seen.append(data)

    producer = Producer({**BROKERS, **ASYNC, "queue.buffering.max.messages": 10, "batch.size": 4, "queue.time": 10},
                        callback_handler=Handler())
    producer._topics["t"] = _TopicState(4, math.inf)
    producer._sender.send = lambda batches: ([], [(b, ProduceResult("t", b.partition, 0)) for b in batches])
    # More than the queue holds: the sender drains it meanwhile -- room is made.
    producer.send_batch("t", [bytes([i]) for i in range(25)], partition=1)
    assert [(d.partition, len(d.messages)) for d in seen] == [(1, 25)]
    assert producer.flush(30)
    assert producer.sent_messages == 25
    producer.close()
