"""kafka-python 3.x against the broker: compressed produce (acks=1), the default idempotent producer, assign+seek consume."""

from __future__ import annotations

import os
import random

import pytest
from kafka import KafkaProducer

from tests.support.clients import by_partition, create_topic, kafka_python_consume
from tests.support.segments import stored_batches

CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def make_messages(count: int, seed: int) -> list[tuple[bytes | None, bytes]]:
    """Compressible but varied values with some raw binary bytes; every tenth key is null.

    Each value repeats its text at least eight times: kafka-python sends a batch UNcompressed when
    compression does not make it smaller, so a batch of one short message (how many messages a batch
    gets depends on timing) would otherwise reach the broker uncompressed now and then.
    """
    rng = random.Random(seed)
    messages = []
    for i in range(count):
        key = None if i % 10 == 0 else f"user-{rng.randint(0, 50)}".encode()
        value = f"event {i} page=/home/{rng.randint(0, 9)} ".encode() * rng.randint(8, 12) + rng.randbytes(rng.randint(0, 16))
        messages.append((key, value))
    return messages


@pytest.mark.parametrize("codec", sorted(CODEC_IDS))
def test_compressed_produce_acks1_and_assign_consume(broker, codec):
    topic = f"kafka-python-{codec}"
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)
    messages = make_messages(3000, seed=CODEC_IDS[codec])

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, enable_idempotence=False,
                             compression_type=codec, linger_ms=10)
    try:
        futures = [producer.send(topic, key=key, value=value, partition=i % partitions)
                   for i, (key, value) in enumerate(messages)]
        producer.flush(timeout=30)
        metadata = [future.get(timeout=10) for future in futures]
    finally:
        producer.close(timeout=10)

    sent = {p: [m for i, m in enumerate(messages) if i % partitions == p] for p in range(partitions)}
    for p in range(partitions):
        offsets = [md.offset for i, md in enumerate(metadata) if i % partitions == p]
        assert offsets == list(range(len(sent[p]))), f"partition {p}: acknowledged offsets are not 0..n-1 in send order"

    received = by_partition(kafka_python_consume(broker.bootstrap, topic, range(partitions), len(messages)))
    for p in range(partitions):
        assert [(r.key, r.value) for r in received[p]] == sent[p]
        assert [r.offset for r in received[p]] == list(range(len(sent[p])))
        batches = stored_batches(broker.partition_dir(topic, p))
        assert batches, f"no batches stored for partition {p}"
        assert {b.compression for b in batches} == {CODEC_IDS[codec]}, "batches must stay compressed as the producer sent them"


def test_default_producer_is_idempotent_and_works(broker):
    """kafka-python's defaults: acks=all and idempotence on (InitProducerId, producer id/epoch/sequence on Produce)."""
    topic = "kafka-python-default"
    create_topic(broker.bootstrap, topic, 1)
    values = [os.urandom(32) + str(i).encode() for i in range(1000)]

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        futures = [producer.send(topic, value=value) for value in values]
        producer.flush(timeout=30)
        offsets = [future.get(timeout=10).offset for future in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(len(values)))

    records = kafka_python_consume(broker.bootstrap, topic, [0], len(values))
    assert [r.value for r in records] == values

    batches = stored_batches(broker.partition_dir(topic, 0))
    assert all(b.producer_id >= 0 for b in batches), "idempotent batches carry the producer id InitProducerId gave"
    assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1
    assert batches[0].base_sequence == 0
    for previous, batch in zip(batches, batches[1:]):
        assert batch.base_sequence == previous.last_sequence + 1, "sequence numbers must be contiguous across batches"
