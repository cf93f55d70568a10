"""Our Producer into our consumers: every codec, sync and async, acks 0, 1 and -1, on one broker.

Each case writes keyed and keyless messages to its own 3-partition topic and reads them back with
both the SimpleConsumer (per partition, by offset) and the Consumer (all partitions), checking
content, per-partition order, and that each key landed on the partition the DefaultPartitioner names.
"""

from __future__ import annotations

import itertools
import time

import pytest

from pipeline.client import Consumer, DefaultPartitioner, FetchRequest, Producer, ProducerData, SimpleConsumer
from pipeline.client.admin import AdminClient
from tests.support import BrokerProcess

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
MODES = ["sync", "async"]
ACKS = [0, 1, -1]
PARTITIONS = 3


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("round-trip")
    with BrokerProcess(work / "logs", log_path=work / "broker.log") as broker:
        yield broker


def expected_messages(case: str) -> list[tuple[bytes | None, bytes]]:
    keyed = [(b"key-%d" % (i % 7), b"%s keyed %05d " % (case.encode(), i) + b"v" * (i % 50)) for i in range(300)]
    keyless = [(None, b"%s keyless %05d" % (case.encode(), i)) for i in range(60)]
    return keyed + keyless


def read_partitions(port: int, topic: str) -> dict[int, list[tuple[bytes | None, bytes]]]:
    """Every message of every partition of ``topic``, read by offset with the SimpleConsumer."""
    by_partition: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(PARTITIONS)}
    simple = SimpleConsumer("127.0.0.1", port)
    try:
        for partition in range(PARTITIONS):
            offset = 0
            while True:
                message_set = simple.fetch(FetchRequest(topic, partition, offset, 64 * 1024))
                got = [(m.key, m.value) for m in message_set]
                if not got:
                    break
                by_partition[partition].extend((bytes(k) if k is not None else None, bytes(v)) for k, v in got)
                offset = message_set.next_offset
    finally:
        simple.close()
    return by_partition


@pytest.mark.parametrize("codec, mode, acks", list(itertools.product(CODECS, MODES, ACKS)))
def test_round_trip(shared_broker, codec, mode, acks):
    topic = f"rt-{codec}-{mode}-{'all' if acks == -1 else acks}"
    bootstrap = shared_broker.bootstrap
    with AdminClient(bootstrap) as admin:
        admin.create_topics([topic], partitions=PARTITIONS)
    messages = expected_messages(topic)
    config = {"metadata.broker.list": bootstrap, "producer.type": mode, "compression.codec": codec,
              "request.required.acks": acks, "batch.size": 25, "queue.time": 5}
    with Producer(config) as producer:
        for key, value in messages[:300]:
            producer.send(ProducerData(topic, key, [value]))
        # Keyless messages in one ProducerData stay together on one partition.
        producer.send(ProducerData(topic, None, [value for _, value in messages[300:]]))

    partitioner = DefaultPartitioner()
    # With acks=0 nothing tells the producer its requests were appended: a fetch on another connection can
    # overtake the last of them, so read until every message is there or the deadline passes.
    deadline = time.monotonic() + 15
    while True:
        by_partition = read_partitions(shared_broker.port, topic)
        if sum(map(len, by_partition.values())) >= len(messages) or time.monotonic() > deadline:
            break
        time.sleep(0.05)

    stored = [m for p in range(PARTITIONS) for m in by_partition[p]]
    assert sorted(stored, key=repr) == sorted(messages, key=repr)
    for partition, items in by_partition.items():
        keyed = [value for key, value in items if key is not None]
        assert keyed == sorted(keyed, key=lambda v: int(v.split()[2])), "per-partition order must hold"
        for key, _ in items:
            if key is not None:
                assert partitioner.partition(key, PARTITIONS) == partition

    consumer = Consumer({"metadata.broker.list": bootstrap, "consumer.timeout.ms": 10000,
                         "auto.offset.reset": "smallest"}, topics=[topic])
    seen = []
    try:
        for record in consumer:
            seen.append((record.key, record.value))
            if len(seen) == len(messages):
                break
    finally:
        consumer.close()
    assert sorted(((bytes(k) if k is not None else None, bytes(v)) for k, v in seen), key=repr) == \
        sorted(messages, key=repr)
