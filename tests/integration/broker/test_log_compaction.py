"""Log compaction (cleanup.policy=compact) through real broker processes.

The brokers clean at once: 16 KiB segments, any dirty bytes (min.cleanable.dirty.ratio 0), a cleaner
backoff of 200 ms, replaced segment files removed at once. Every test writes rounds of updates to a few keys
(tests/support/compaction.py's KeyedWriter knows each key's latest record) and then rolls the log, so that
everything written is outside the active segment. Cleaning is awaited by reading the partition until it
holds exactly each key's latest record (and the cleaner's checkpoint has moved), with deadlines.

- cleaning keeps the latest record of every key at its offset (gaps between them), shrinks the log to
  about the bytes of those records and shows in the cleaner's metrics (kafka_log_logcleaner_*); tombstones
  stay for delete.retention.ms after cleaning, then go;
- SIGKILL inside a cleaning pass (the broker/log/log_config.py CLEANER_PAUSE_POINTS, asked for by the broker setting
  testing.pause.at: writing the .cleaned segment, before the swap, during the swap): after a restart
  no .cleaned/.swap file is left, the segments are whole, every key's latest record is still there, and
  cleaning then completes;
- stock clients: kafka-python's and confluent-kafka's admins create compacted topics (compact, and
  compact,delete), their producers write keyed records and tombstones, both consumers read the compacted log
  back; DescribeConfigs and `topics describe` show cleanup.policy;
- memory: cleaning a 2 GiB log of more distinct keys than a 1 MiB dedupe buffer holds (three passes) keeps the
  RSS of the broker and its cleaner worker process within their idle sizes, the buffers and a fixed allowance;
- a pass paused in the cleaner worker dies with a SIGKILLed broker.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from kafka import KafkaProducer

from broker.log.cleaner import CleanerConfig
from broker.log.cleaner_channel import Channel
from tests.integration.broker.test_metrics import scrape, value as sample
from tests.support import REPO_ROOT, wait_until
from tests.support.broker import BrokerProcess, rss_bytes
from tests.support.clients import confluent_consume, create_topic, kafka_python_consume
from tests.support.compaction import (KeyedWriter, Send, check_segments, cleaner_checkpoint, cleaning_leftovers,
                                      compacted_topic_configs, is_roll, keyed_batches, latest_by_key, log_bytes,
                                      read_log, wire_sender)
from tests.support.load import produce_batches
from tests.support.wire import KafkaConnection

SEGMENT_BYTES = 16 * 1024
CLEANER_SETTINGS = {"log.cleaner.backoff.ms": 200}
KEYS = 40
ROUNDS = 60
VALUE_BYTES = 200
RECORD_OVERHEAD = 12  # a record's varints and attributes around its key and value (at most, for these sizes)
BATCH_OVERHEAD = 61  # a RecordBatch v2 header
# The cleaner's pause points and the suffixes of the files in flight there: (must be present, must be absent).
PAUSE_POINTS = {
    "writing-cleaned": ({".cleaned"}, {".swap"}),
    "before-swap": ({".cleaned"}, {".swap"}),
    "during-swap": ({".swap"}, set()),
}

MiB = 1024 * 1024


def key(index: int) -> bytes:
    return b"key-%03d" % index


def value(index: int, round_: int) -> bytes:
    return f"key {index} round {round_} ".encode().ljust(VALUE_BYTES, b".")


def write_rounds(writer: KeyedWriter, rounds: int = ROUNDS, seed: int = 17) -> None:
    """Every key once, then ``rounds - 1`` rounds each updating a random half of the keys."""
    rng = random.Random(seed)
    writer.write([(key(k), value(k, 0)) for k in range(KEYS)])
    for round_ in range(1, rounds):
        writer.write([(key(k), value(k, round_)) for k in sorted(rng.sample(range(KEYS), KEYS // 2))])


def wait_compacted(read: Callable[[], list], writer: KeyedWriter, add_dirt: Callable[[], None] | None = None,
                   timeout: float = 30.0) -> list:
    """Poll ``read`` until it gives exactly the latest record of every key that is not a tombstone.

    A pass keeps tombstones (delete.retention.ms has not passed since it cleaned them); another pass drops
    them, and the cleaner only passes again over a log that is dirty: while the log is clean but for its
    tombstones, ``add_dirt`` writes one more update and rolls."""
    def compacted() -> list | None:
        records = read()
        if records == writer.kept(tombstones=False):
            return records
        if add_dirt is not None and records == writer.kept(tombstones=True):
            add_dirt()
        return None
    def difference() -> str:
        records, wanted = read(), writer.kept(tombstones=False)
        extra = [(r.offset, r.key, r.value is None) for r in records if r not in wanted]
        missing = [(k.offset, k.key) for k in wanted if k not in records]
        return (f"exactly the latest record of every key: {len(records)} records for {len(wanted)} live keys, "
                f"extra (offset, key, tombstone) {extra[:12]}, missing {missing[:12]}")
    return wait_until(compacted, timeout, interval=0.3, message=difference)


def dirt(writer: KeyedWriter) -> Callable[[], None]:
    """An ``add_dirt`` for wait_compacted: one more update of a live key (key 1), then a roll."""
    rounds = iter(range(1000, 2000))

    def add_dirt() -> None:
        writer.write([(key(1), value(1, next(rounds)))])
        writer.roll()
    return add_dirt


def start_broker(broker_factory, topic: str | None = None, configs: dict[str, str] | None = None,
                 **kwargs: object) -> BrokerProcess:
    """A broker with CLEANER_SETTINGS (plus ``overrides``) and, if ``topic`` is given, that topic created with
    ``configs`` (default: compacted, SEGMENT_BYTES segments)."""
    overrides = dict(CLEANER_SETTINGS)
    overrides.update(kwargs.pop("overrides", {}))
    broker = broker_factory(overrides=overrides, **kwargs)
    if topic is not None:
        create_topic(broker.bootstrap, topic, configs=configs or compacted_topic_configs(SEGMENT_BYTES))
    return broker


def test_cleaning_keeps_each_keys_latest_record_at_its_offset_and_shrinks_the_log(broker_factory):
    topic = "compacted"
    broker = start_broker(broker_factory, topic, overrides={"metrics.port": 0})
    partition_dir = broker.partition_dir(topic, 0)
    with KafkaConnection(broker.host, broker.port) as conn:
        writer = KeyedWriter(wire_sender(conn, topic), SEGMENT_BYTES)
        write_rounds(writer)
        written = writer.end_offset
        dirty_bytes = log_bytes(partition_dir, active=False)
        roll_offset = writer.roll()

        records = wait_compacted(lambda: read_log(conn, topic), writer)
        assert read_log(conn, topic) == records  # stable: nothing else goes

    offsets = [record.offset for record in records]
    assert offsets == sorted(set(offsets)) and offsets[-1] == roll_offset == written
    assert len(offsets) == KEYS + 1 < written  # gaps where the older updates were
    assert wait_until(lambda: cleaner_checkpoint(broker.log_dir, topic) == roll_offset, 10,
                      message=lambda: f"cleaner-offset-checkpoint at {roll_offset}, "
                                      f"is {cleaner_checkpoint(broker.log_dir, topic)}")
    # Disk: the cleaned segments hold the latest records and at most one batch header per round they came from.
    kept = [r for r in records if not is_roll(r.key)]
    payload = sum(len(r.key) + len(r.value) for r in kept)
    cleaned_bytes = log_bytes(partition_dir, active=False)
    assert payload <= cleaned_bytes <= payload + RECORD_OVERHEAD * len(kept) + BATCH_OVERHEAD * ROUNDS, \
        f"{cleaned_bytes} bytes left of {dirty_bytes} for {len(kept)} records of {payload} bytes"
    assert cleaned_bytes < dirty_bytes / 10
    assert cleaning_leftovers(partition_dir) == []
    check_segments(partition_dir)

    # The cleaner's metrics: what it read and freed in this log, nothing left dirty, no uncleanable log.
    samples = scrape(broker)
    log_labels = {"topic": topic, "partition": 0}
    read = sample(samples, "kafka_log_logcleaner_bytes_read_total", **log_labels)
    recovered = sample(samples, "kafka_log_logcleaner_bytes_recovered_total", **log_labels)
    written_back = sample(samples, "kafka_log_logcleaner_bytes_written_total", **log_labels)
    assert read >= dirty_bytes and recovered == read - written_back > 0
    assert sample(samples, "kafka_log_logcleaner_dirty_bytes", **log_labels) == 0
    assert sample(samples, "kafka_log_logcleanermanager_uncleanable_partitions_count") == 0
    # The pass ran in the worker process, whose CPU and memory are the worker's metrics.
    assert (sample(samples, "kafka_log_logcleaner_worker_cpu_seconds_total", worker="0") or 0) > 0
    assert (sample(samples, "kafka_log_logcleaner_worker_resident_memory_bytes", worker="0") or 0) > 1 << 20


def test_tombstones_stay_for_delete_retention_ms_then_their_keys_vanish(broker_factory):
    delete_retention_s = 2.0
    topic = "tombstones"
    broker = start_broker(broker_factory, topic,
                          compacted_topic_configs(SEGMENT_BYTES, delete_retention_ms=int(delete_retention_s * 1000)))
    deleted = [key(k) for k in range(0, KEYS, 4)]
    with KafkaConnection(broker.host, broker.port) as conn:
        writer = KeyedWriter(wire_sender(conn, topic), SEGMENT_BYTES)
        write_rounds(writer, rounds=20)
        writer.write([(k, None) for k in deleted])
        writer.roll()
        rolled_at = time.monotonic()

        def first_pass() -> tuple[float, list] | None:
            started = time.monotonic()
            records = read_log(conn, topic)
            done = records in (writer.kept(tombstones=True), writer.kept(tombstones=False))
            return done and (started, records)
        read_at, records = wait_until(first_pass, 20, interval=0.1, message="a first cleaning pass")
        if read_at - rolled_at < delete_retention_s:
            # Read before delete.retention.ms had passed since the roll, so since cleaning: the tombstones are kept.
            assert {r.key for r in records if r.value is None} == set(deleted)

        records = wait_compacted(lambda: read_log(conn, topic), writer, dirt(writer))
    assert writer.tombstoned() == set(deleted)
    assert not {r.key for r in records} & set(deleted)
    assert {r.key for r in records if not is_roll(r.key)} == {key(k) for k in range(KEYS)} - set(deleted)
    check_segments(broker.partition_dir(topic, 0))


@pytest.mark.parametrize("point", PAUSE_POINTS)
def test_sigkill_inside_a_cleaning_pass_loses_nothing_compaction_keeps(broker_factory, tmp_path, point):
    marker = tmp_path / "paused"
    topic = "crashed"
    # Written with the cleaner off: a pass paused inside the swap holds the log's lock, appends would wait on it.
    broker = start_broker(broker_factory, topic, overrides={"log.cleaner.enable": "false"})
    partition_dir = broker.partition_dir(topic, 0)
    with KafkaConnection(broker.host, broker.port) as conn:
        writer = KeyedWriter(wire_sender(conn, topic), SEGMENT_BYTES)
        write_rounds(writer)
        writer.roll()
    broker.restart({"log.cleaner.enable": "true", "testing.pause.at": point,
                    "testing.pause.file": marker})

    def paused_pid() -> int | None:
        # The pass pauses in the broker's cleaner worker, the swap in the broker itself.
        parts = marker.read_text().split() if marker.exists() else []
        if len(parts) == 2 and parts[1] == point and int(parts[0]) in [broker.pid, *broker.child_pids()]:
            return int(parts[0])
        return None

    wait_until(paused_pid, 20, message=f"the cleaner to pause at {point!r}")
    paused = paused_pid()
    in_flight = cleaning_leftovers(partition_dir)
    present, absent = PAUSE_POINTS[point]
    suffixes = {Path(name).suffix for name in in_flight}
    assert present <= suffixes and not absent & suffixes, f"at {point}: {in_flight}"
    broker.kill()
    wait_until(lambda: not process_alive(paused), 10, message=f"process {paused} to die with the broker")

    # Recovery alone first (a running cleaner would have .cleaned files of its own pass in flight).
    broker.restart({"log.cleaner.enable": "false", "testing.pause.at": ""})
    assert cleaning_leftovers(partition_dir) == []
    check_segments(partition_dir)
    with KafkaConnection(broker.host, broker.port) as conn:
        records = read_log(conn, topic)
        offsets = [record.offset for record in records]
        assert offsets == sorted(set(offsets)) and offsets[-1] == writer.end_offset - 1
        assert latest_by_key(records) == writer.latest, "a key's latest record was lost or is no longer its last"

    broker.restart({"log.cleaner.enable": "true"})
    with KafkaConnection(broker.host, broker.port) as conn:
        wait_compacted(lambda: read_log(conn, topic), writer)
    assert cleaning_leftovers(partition_dir) == []
    check_segments(partition_dir)


def kafka_python_sender(bootstrap: str, topic: str) -> tuple[Send, Callable[[], None]]:
    """A `Send` over kafka-python's KafkaProducer (idempotent, its default; each round flushed), and its close."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2 * SEGMENT_BYTES)

    def send(records):
        futures = [producer.send(topic, key=k, value=v, partition=0) for k, v in records]
        producer.flush(timeout=15)
        return consecutive([future.get(timeout=15).offset for future in futures])
    return send, producer.close


def confluent_sender(bootstrap: str, topic: str) -> tuple[Send, Callable[[], None]]:
    """A `Send` over confluent-kafka's Producer (idempotent; each round flushed), and its close."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})

    def send(records):
        delivered: list = []
        for k, v in records:
            producer.produce(topic, key=k, value=v, partition=0,
                             on_delivery=lambda error, message: delivered.append(error or message.offset()))
        assert producer.flush(15) == 0, "confluent-kafka producer did not deliver within 15 s"
        return consecutive(delivered)
    return send, producer.close


def consecutive(offsets: list) -> int:
    """The first of ``offsets``, which a producer got for one round written in order to one partition."""
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), offsets
    return offsets[0]


def kafka_python_create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    create_topic(bootstrap, topic, configs=configs)


def confluent_create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values()
    future.result(timeout=15)


def kafka_python_topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-admin", request_timeout_ms=15000)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    finally:
        admin.close()
    return {name: entry["value"] for name, entry in described["topic"][topic].items()}


def confluent_topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {name: entry.value for name, entry in future.result(timeout=15).items()}


STOCK_CLIENTS = {
    "kafka-python": (kafka_python_create, kafka_python_sender, "compact"),
    "confluent-kafka": (confluent_create, confluent_sender, "compact,delete"),
}


@pytest.mark.parametrize("client", STOCK_CLIENTS)
def test_stock_clients_create_write_and_read_compacted_topics(broker_factory, client):
    create, sender, policy = STOCK_CLIENTS[client]
    broker = start_broker(broker_factory)
    topic = f"stock-{policy.replace(',', '-')}"
    create(broker.bootstrap, topic, compacted_topic_configs(SEGMENT_BYTES, policy=policy))
    for described in (kafka_python_topic_configs(broker.bootstrap, topic), confluent_topic_configs(broker.bootstrap, topic)):
        assert described["cleanup.policy"] == policy
    cli = subprocess.run([sys.executable, "-m", "pipeline", "topics", "describe", topic, "--bootstrap-server",
                          broker.bootstrap], capture_output=True, text=True, timeout=30, cwd=REPO_ROOT, check=False)
    assert cli.returncode == 0 and f"cleanup.policy={policy}" in cli.stdout, cli.stdout + cli.stderr

    deleted = [key(k) for k in range(0, KEYS, 5)]
    send, close = sender(broker.bootstrap, topic)
    try:
        writer = KeyedWriter(send, SEGMENT_BYTES)
        write_rounds(writer, rounds=10)
        writer.write([(k, None) for k in deleted])
        writer.roll()
        with KafkaConnection(broker.host, broker.port) as conn:
            wait_compacted(lambda: read_log(conn, topic), writer, dirt(writer))
    finally:
        close()

    live = {k.key: (k.offset, k.value) for k in writer.kept(tombstones=False)}
    for consume in (kafka_python_consume, confluent_consume):
        records = consume(broker.bootstrap, topic, [0], expected=len(live), timeout=30)
        assert {r.key: (r.offset, r.value) for r in records} == live, consume.__name__
        assert not {r.key for r in records} & set(deleted), consume.__name__


# The memory check, at the size: 2 GiB of records with 16-byte keys and 16,000-byte values, 50,000 keys
# each written about 2.7 times, in 128 MiB segments, cleaned with a 1 MiB dedupe buffer: the offset map holds some
# 39,000 keys (Kafka's 24 bytes a key at a 0.9 load factor), so the cleaner needs three passes (some 20 s here;
# smaller values cost the same bytes more per-record work and no more memory). The passes run in the broker's
# cleaner worker process: the peak RSS of the broker and the worker together may exceed an idle broker's and an
# idle worker's by the dedupe buffer, the two I/O buffers and a fixed allowance of 24 MiB for the transient objects
# of a pass. The allowance is below a fifth of one segment and about a hundredth of the log, so a cleaner that read
# a segment or the log into memory would exceed it.
MEMORY_LOG_BYTES = 2048 * MiB
MEMORY_KEYS = 50_000
MEMORY_VALUE_BYTES = 16_000
MEMORY_SEGMENT_BYTES = 128 * MiB
DEDUPE_BUFFER_BYTES = 1 * MiB
IO_BUFFER_BYTES = 512 * 1024
RSS_ALLOWANCE_BYTES = 24 * MiB


def test_cleaning_with_a_small_dedupe_buffer_keeps_rss_bounded(broker_factory):
    topic = "large"
    broker = start_broker(broker_factory, overrides={
        "log.cleaner.enable": "false", "log.cleaner.dedupe.buffer.size": DEDUPE_BUFFER_BYTES,
        "log.cleaner.io.buffer.size": IO_BUFFER_BYTES})
    idle_rss = broker.rss_bytes()
    create_topic(broker.bootstrap, topic, configs=compacted_topic_configs(MEMORY_SEGMENT_BYTES))
    produce_batches(broker.host, broker.port, topic,
                    keyed_batches(MEMORY_LOG_BYTES, MEMORY_KEYS, MEMORY_VALUE_BYTES), in_flight=2)
    partition_dir = broker.partition_dir(topic, 0)
    dirty_bytes = log_bytes(partition_dir, active=False)
    active_base = int(sorted(partition_dir.glob("*.log"))[-1].stem)

    broker.restart({"log.cleaner.enable": "true"})
    wait_until(lambda: cleaner_checkpoint(broker.log_dir, topic) == active_base, 300, interval=0.5,
               message=lambda: f"the log cleaned up to {active_base} (checkpoint "
                               f"{cleaner_checkpoint(broker.log_dir, topic)})")
    workers = broker.child_pids()
    assert len(workers) == 1, f"one cleaner worker expected, the broker's children are {workers}"
    peak = broker.peak_rss_bytes() + rss_bytes(workers[0], "VmHWM")
    cleaned_bytes = log_bytes(partition_dir, active=False)
    assert cleaned_bytes < dirty_bytes * 0.75, f"{cleaned_bytes} of {dirty_bytes} bytes left"
    idle_worker = idle_worker_peak_rss()
    bound = idle_rss + idle_worker + DEDUPE_BUFFER_BYTES + 2 * IO_BUFFER_BYTES + RSS_ALLOWANCE_BYTES
    assert peak <= bound, f"peak RSS of the broker and its cleaner worker {peak / MiB:.1f} MiB while cleaning, " \
                          f"bound {bound / MiB:.1f} MiB (idle broker {idle_rss / MiB:.1f} MiB, idle worker " \
                          f"{idle_worker / MiB:.1f} MiB)"


def idle_worker_peak_rss() -> int:
    """The peak RSS of a cleaner worker that starts, takes its config and exits without a pass."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        worker = subprocess.Popen([sys.executable, "-m", "broker.log.cleaner_worker", "--fd", str(theirs.fileno()),
                                   "--parent-pid", str(os.getpid())], pass_fds=[theirs.fileno()], cwd=REPO_ROOT)
        channel = Channel(ours)
        channel.send(("config", CleanerConfig(dedupe_buffer_size=DEDUPE_BUFFER_BYTES,
                                              io_buffer_size=IO_BUFFER_BYTES)))
        channel.send(("exit",))
        _, status, usage = os.wait4(worker.pid, 0)
        worker.returncode = os.waitstatus_to_exitcode(status)
    assert worker.returncode == 0
    return usage.ru_maxrss * 1024


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
