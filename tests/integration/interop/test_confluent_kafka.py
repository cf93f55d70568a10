"""confluent-kafka (librdkafka 2.16) against the broker: Producer with each codec, idempotence, Consumer.assign."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import Producer

from tests.support.clients import by_partition, confluent_consume, create_topic
from tests.support.segments import stored_batches

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def produce_all(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes, int]], **config: object) -> list[tuple[int, int]]:
    """Produce (key, value, partition) triples; return the acknowledged (partition, offset) of each, in send order."""
    acknowledged: list[tuple[int, int] | None] = [None] * len(messages)
    errors = []

    def on_delivery(index: int):
        def report(error, message) -> None:
            if error is not None:
                errors.append(error)
            else:
                acknowledged[index] = (message.partition(), message.offset())
        return report

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, **config})
    for index, (key, value, partition) in enumerate(messages):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery(index))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages not delivered within 30s"
    assert not errors, f"delivery errors: {errors[:5]}"
    assert all(ack is not None for ack in acknowledged)
    return acknowledged  # type: ignore[return-value]


def make_messages(count: int, partitions: int, seed: int) -> list[tuple[bytes | None, bytes, int]]:
    rng = random.Random(seed)
    return [
        (None if i % 7 == 0 else f"k{i % 31}".encode(),
         f"confluent event {i} ".encode() * rng.randint(1, 6) + rng.randbytes(rng.randint(0, 24)),
         i % partitions)
        for i in range(count)
    ]


@pytest.mark.parametrize("codec", sorted(CODEC_IDS))
def test_producer_acks1_with_codec_and_assign_consume(broker, codec):
    topic = f"confluent-{codec}"
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)
    messages = make_messages(3000, partitions, seed=CODEC_IDS[codec])

    acked = produce_all(broker.bootstrap, topic, messages, **{"acks": 1, "compression.type": codec})
    for p in range(partitions):
        offsets = [offset for partition, offset in acked if partition == p]
        assert offsets == list(range(len(offsets))), f"partition {p}: acknowledged offsets are not 0..n-1 in send order"

    received = by_partition(confluent_consume(broker.bootstrap, topic, range(partitions), len(messages)))
    for p in range(partitions):
        expected = [(key, value) for key, value, partition in messages if partition == p]
        assert [(r.key, r.value) for r in received[p]] == expected
        # librdkafka sends a batch uncompressed when compressing it saved nothing (a small batch of random
        # bytes, depending on how the linger timer cut it): both are stored as sent, and nothing else.
        codecs = {b.compression for b in stored_batches(broker.partition_dir(topic, p))}
        assert CODEC_IDS[codec] in codecs and codecs <= {0, CODEC_IDS[codec]}, codecs


def test_idempotent_producer_acks_all(broker):
    topic = "confluent-idempotent"
    create_topic(broker.bootstrap, topic, 1)
    messages = make_messages(2000, 1, seed=99)

    acked = produce_all(broker.bootstrap, topic, messages, **{"enable.idempotence": True, "compression.type": "lz4"})
    assert [offset for _, offset in acked] == list(range(len(messages)))

    records = confluent_consume(broker.bootstrap, topic, [0], len(messages))
    assert [(r.key, r.value) for r in records] == [(key, value) for key, value, _ in messages]
    batches = stored_batches(broker.partition_dir(topic, 0))
    assert all(b.producer_id >= 0 for b in batches)
    for previous, batch in zip(batches, batches[1:]):
        assert batch.base_sequence == previous.last_sequence + 1
