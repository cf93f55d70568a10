"""Crash safety: SIGKILL during acks=1 produce loses no acknowledged message; recovery truncates a torn tail."""

from __future__ import annotations

import threading

import pytest
from kafka import KafkaProducer

from tests.support import CLEAN_SHUTDOWN_MARKER
from tests.support.clients import by_partition, create_topic, kafka_python_consume
from tests.support.segments import scan_partition

PARTITIONS = 2


def assert_log_is_whole_batches(partition_dir) -> int:
    """Every segment parses as whole CRC-valid batches with contiguous offsets; return the log end offset."""
    scans = scan_partition(partition_dir)
    assert scans, f"no segments in {partition_dir}"
    next_offset = None
    for scan in scans:
        assert scan.ends_on_batch_boundary, f"{scan.path.name}: {scan.size - scan.whole_batches_end} bytes of partial batch at the end"
        for batch in scan.batches:
            if next_offset is not None:
                assert batch.base_offset == next_offset, f"{scan.path.name}: batch at offset {batch.base_offset}, expected {next_offset}"
            next_offset = batch.next_offset
    return next_offset or 0


def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False)
    try:
        return [producer.send(topic, value=value, partition=0).get(timeout=10).offset for value in values]
    finally:
        producer.close(timeout=10)


def test_sigkill_while_producing_keeps_every_acknowledged_message(broker_factory):
    broker = broker_factory(overrides={"log.flush.interval.messages": 1})
    topic = "crash"
    create_topic(broker.bootstrap, topic, PARTITIONS)

    acknowledged: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()
    enough = threading.Event()

    def on_ack(value: bytes):
        def record(metadata) -> None:
            with lock:
                acknowledged[(metadata.partition, metadata.offset)] = value
                if len(acknowledged) >= 3000:
                    enough.set()
        return record

    # Short request and delivery timeouts: sends still queued when the broker dies expire within seconds.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, enable_idempotence=False, linger_ms=1,
                             retries=0, request_timeout_ms=2000, delivery_timeout_ms=3000, max_block_ms=3000)
    sent = None
    try:
        for i in range(200_000):
            value = f"message {i} ".encode() * 4
            producer.send(topic, value=value, partition=i % PARTITIONS).add_callback(on_ack(value))
            if enough.is_set():
                # A burst right before the kill, so that sends are in flight when the broker dies (once, every
                # send up to the kill had been acknowledged already).
                for j in range(i + 1, i + 1001):
                    burst = f"message {j} ".encode() * 4
                    producer.send(topic, value=burst, partition=j % PARTITIONS).add_callback(on_ack(burst))
                broker.kill()
                sent = i + 1001
                break
    finally:
        producer.close(timeout=20)
    assert sent is not None, "the producer never got 3000 acknowledgements"
    with lock:
        acked = dict(acknowledged)
    assert len(acked) < sent, "some sends must still have been in flight when the broker died"
    assert not (broker.log_dir / CLEAN_SHUTDOWN_MARKER).exists(), "a killed broker must not leave a clean-shutdown marker"

    broker.start()
    end_offsets = {p: assert_log_is_whole_batches(broker.partition_dir(topic, p)) for p in range(PARTITIONS)}
    records = by_partition(kafka_python_consume(broker.bootstrap, topic, range(PARTITIONS), sum(end_offsets.values())))
    stored = {(p, r.offset): r.value for p, rs in records.items() for r in rs}
    missing = [key for key in acked if stored.get(key) != acked[key]]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages missing or different after restart, e.g. {missing[:5]}"


@pytest.mark.parametrize("damage", ["torn-write", "corrupt-last-batch"])
def test_recovery_truncates_damaged_tail_after_crash_following_clean_restart(broker_factory, damage):
    broker = broker_factory()
    topic = "torn"
    create_topic(broker.bootstrap, topic, 1)
    first = [f"before clean stop {i}".encode() for i in range(100)]
    assert produce_values(broker.bootstrap, topic, first) == list(range(100))

    assert broker.stop() == 0
    assert (broker.log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    broker.start()
    second = [f"after restart {i}".encode() for i in range(100)]
    assert produce_values(broker.bootstrap, topic, second) == list(range(100, 200))
    broker.kill()
    assert not (broker.log_dir / CLEAN_SHUTDOWN_MARKER).exists(), \
        "the marker of the previous clean shutdown must be gone once the broker runs again, or a crash looks clean"

    active = broker.segment_files(topic, 0)[-1]
    last_batch = scan_partition(broker.partition_dir(topic, 0))[-1].batches[-1]
    data = bytearray(active.read_bytes())
    tail_start = len(data) - last_batch.size
    if damage == "torn-write":
        # The first half of a copy of the last batch, as if the process died inside write().
        data += data[tail_start : tail_start + last_batch.size // 2]
        expected_size, kept = len(data) - last_batch.size // 2, first + second
    else:
        # A flipped bit in the last batch's records: its CRC no longer matches.
        data[-1] ^= 0x01
        expected_size, kept = tail_start, first + second[:-1]
    active.write_bytes(data)

    broker.start()
    assert active.stat().st_size == expected_size, "recovery must truncate at the first incomplete or corrupt batch"
    assert assert_log_is_whole_batches(broker.partition_dir(topic, 0)) == len(kept)
    assert produce_values(broker.bootstrap, topic, [b"after recovery"]) == [len(kept)]
    records = kafka_python_consume(broker.bootstrap, topic, [0], len(kept) + 1)
    assert [r.value for r in records] == kept + [b"after recovery"]
