"""Messages written by kcat (librdkafka) and kafka-python, every codec, read back by our SimpleConsumer and
Consumer: byte-identical keys, values and headers, in per-partition order."""

from __future__ import annotations

import random

import pytest
from kafka import KafkaProducer

from pipeline.client.consumer import Consumer
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from tests.support.clients import create_topic, run_kcat

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3

Message = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def read_with_simple_consumer(broker, topic: str, partitions: int) -> dict[int, list[Message]]:
    """Every message of every partition, fetched with small fetches so several round trips are needed."""
    got: dict[int, list[Message]] = {}
    with SimpleConsumer(broker.host, broker.port, buffer_size=2048) as consumer:
        for partition in range(partitions):
            end = consumer.get_offsets_before(topic, partition, -1, 1)[0]
            offset = 0
            messages: list[Message] = []
            while offset < end:
                result = consumer.fetch(FetchRequest(topic, partition, offset))
                for m in result:
                    assert m.offset == len(messages), f"partition {partition}: offset {m.offset} out of order"
                    messages.append((m.key, m.value, m.headers))
                offset = result.next_offset
            got[partition] = messages
    return got


def read_with_consumer(broker, topic: str, expected: int) -> dict[int, list[Message]]:
    got: dict[int, list[Message]] = {}
    offsets: dict[int, list[int]] = {}
    config = {"metadata.broker.list": broker.bootstrap, "auto.offset.reset": "smallest",
              "consumer.timeout.ms": 3000, "fetch.message.max.bytes": 4096}
    count = 0
    with Consumer(config, topics=[topic]) as consumer:
        for m in consumer:
            assert m.topic == topic
            got.setdefault(m.partition, []).append((m.key, m.value, m.headers))
            offsets.setdefault(m.partition, []).append(m.offset)
            count += 1
            if count == expected:
                break
    for partition, seen in offsets.items():
        assert seen == list(range(len(seen))), f"partition {partition} offsets out of order"
    return got


def random_bytes(rng: random.Random, low: int, high: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(low, high)))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_producer_to_our_consumers(broker, codec):
    topic = f"interop-kp-{codec}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    rng = random.Random(codec)
    sent: dict[int, list[Message]] = {p: [] for p in range(PARTITIONS)}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, enable_idempotence=False,
                             compression_type=None if codec == "none" else codec, linger_ms=5)
    try:
        futures = []
        for i in range(300):
            partition = i % PARTITIONS
            value = None if i % 50 == 3 else random_bytes(rng, 0, 600)
            key = None if i % 7 == 0 and value is not None else random_bytes(rng, 0, 20)
            headers = [("trace", random_bytes(rng, 0, 8)), ("i", str(i).encode())] if i % 3 == 0 else []
            futures.append(producer.send(topic, key=key, value=value, partition=partition, headers=headers))
            sent[partition].append((key, value, tuple(headers)))
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=10)
    finally:
        producer.close(timeout=10)
    assert read_with_simple_consumer(broker, topic, PARTITIONS) == sent
    assert read_with_consumer(broker, topic, 300) == sent


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_producer_to_our_consumers(broker, codec):
    topic = f"interop-kcat-{codec}"
    create_topic(broker.bootstrap, topic, 2)
    rng = random.Random(codec)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 -_"
    sent: dict[int, list[Message]] = {}
    for partition in range(2):
        pairs = [(f"k{partition}-{i}", f"p{partition}-{i}-" + "".join(rng.choices(alphabet, k=rng.randint(0, 300))))
                 for i in range(200)]
        payload = "".join(f"{key}\t{value}\n" for key, value in pairs).encode()
        run_kcat(["-b", broker.bootstrap, "-P", "-t", topic, "-p", str(partition), "-K", "\t", "-z", codec,
                  "-H", "origin=kcat", "-H", f"partition={partition}", "-X", "linger.ms=20"], input_bytes=payload)
        headers = (("origin", b"kcat"), ("partition", str(partition).encode()))
        sent[partition] = [(key.encode(), value.encode(), headers) for key, value in pairs]
    assert read_with_simple_consumer(broker, topic, 2) == sent
    assert read_with_consumer(broker, topic, 400) == sent
