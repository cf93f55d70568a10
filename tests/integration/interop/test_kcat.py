"""kcat (librdkafka 2.0) against the broker: bulk produce per partition and consume it back byte-identical."""

from __future__ import annotations

import random

import pytest

from tests.support.clients import create_topic, run_kcat

PARTITIONS = 4
PER_PARTITION = 25_000
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/=+!@#$%^&*()[]{}<>?,;' "


def make_lines(partition: int, count: int, rng: random.Random) -> list[tuple[str, str]]:
    """(key, value) pairs without tabs or newlines (kcat's key and message delimiters), varied lengths."""
    pairs = []
    for i in range(count):
        value = f"p{partition}-{i:06d}-" + "".join(rng.choices(ALPHABET, k=rng.randint(0, 120)))
        pairs.append((f"key-{partition}-{i % 97}", value))
    return pairs


@pytest.mark.slow
def test_kcat_100k_messages_round_trip_in_order_per_partition(broker):
    topic = "kcat-bulk"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    rng = random.Random(20110612)
    sent = {p: make_lines(p, PER_PARTITION, rng) for p in range(PARTITIONS)}

    for partition, pairs in sent.items():
        payload = "".join(f"{key}\t{value}\n" for key, value in pairs).encode()
        run_kcat(["-b", broker.bootstrap, "-P", "-t", topic, "-p", str(partition), "-K", "\t",
                  "-X", "linger.ms=20"], input_bytes=payload)

    output = run_kcat(["-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                       "-f", "%p\t%o\t%k\t%s\n"])
    received: dict[int, list[tuple[int, str, str]]] = {p: [] for p in range(PARTITIONS)}
    for line in output.decode().splitlines():
        partition, offset, key, value = line.split("\t", 3)
        received[int(partition)].append((int(offset), key, value))

    for partition in range(PARTITIONS):
        got = received[partition]
        assert len(got) == PER_PARTITION, f"partition {partition}: {len(got)} of {PER_PARTITION} messages"
        assert [offset for offset, _, _ in got] == list(range(PER_PARTITION)), f"partition {partition}: offsets not 0..n-1"
        expected = sent[partition]
        mismatches = [i for i, (_, key, value) in enumerate(got) if (key, value) != expected[i]]
        assert not mismatches, f"partition {partition}: first mismatch at offset {mismatches[0]}: {got[mismatches[0]]} != {expected[mismatches[0]]}"


def test_kcat_metadata_lists_topic_and_partitions(broker):
    topic = "kcat-metadata"
    create_topic(broker.bootstrap, topic, 3)
    listing = run_kcat(["-b", broker.bootstrap, "-L", "-t", topic]).decode()
    assert f'topic "{topic}" with 3 partitions' in listing
    for partition in range(3):
        assert f"partition {partition}, leader" in listing
