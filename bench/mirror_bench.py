"""Mirror throughput and latency: one `python -m mirror` process between two clusters on this machine.

A ZooKeeper and two one-broker clusters (source and target, chroots /src and /dst). Throughput: MESSAGES
records of SIZE bytes are loaded into the source topic first (PARTITIONS partitions), then one mirror
process copies them; the rate is counted from the first record in the target to the last (records/s and
MB/s of values; the mirror's start-up and group join are not counted). Latency: with the mirror running
and caught up, a sync producer (acks=1) appends RATE records/s to the source, each stamped with the time
its send began; a consumer long-polling the target takes the time each one arrives (the first second is a
warm-up: the target topic is created by the mirror's first record of it, and the reader waits for it). The
figure is source send -> target consumer, an upper bound of source append -> target acknowledgement.

With --avro the source is loaded instead by the frontend emulator (in this process, with a standalone schema
registry) for --avro-seconds at full speed: the emulators' Avro events, lz4-compressed batches, one topic per
event type (each with --partitions partitions).

    .venv/bin/python -m bench.mirror_bench [--messages 200000] [--size 200] [--rate 1000] [--seconds 10]
    .venv/bin/python -m bench.mirror_bench --avro [--avro-seconds 5] [--audit]

The mirror's CPU (user + system, from /proc) is reported per record copied over the throughput phase, and
with --idle-seconds over that long with no traffic at the end (the cost of an idle mirror). With --audit (only
with --avro) the schema registry stays up and the mirror counts its tier-mirror audit as it does when deployed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from pipeline.client.admin import AdminClient
from pipeline.client.consumer import Consumer
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.simple_consumer import SimpleConsumer
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.zk.server import ZooKeeperServer
from producers.config import EmulatorConfig
from producers.emulator import FrontendEmulator
from producers.metrics import total
from schemas.events import EVENT_TOPICS
from tests.support.cluster import BrokerCluster
from tests.support.mirror import MirrorProcess
from tests.support.registry import RegistryProcess

TOPIC = "mirror-bench"
LATENCY_TOPIC = "mirror-bench-latency"
MiB = 1024 * 1024
_STAMP = struct.Struct(">q")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def end_total(cluster: BrokerCluster, topics: list[str], partitions: int) -> int:
    broker = next(iter(cluster.brokers.values()))
    found = 0
    with SimpleConsumer(broker.host, broker.port) as consumer:
        for topic in topics:
            try:
                found += sum(consumer.get_offsets_before(topic, p, -1, 1)[0] for p in range(partitions))
            except KafkaProtocolError:
                continue  # not created in the target yet
    return found


def create_topics(source: BrokerCluster, topics: list[str], partitions: int) -> None:
    with AdminClient(source.bootstrap) as admin:
        for topic in topics:
            admin.create_topics(topic, partitions=partitions)
        admin.create_topics(LATENCY_TOPIC, partitions=1)
    for topic in topics:
        source.wait_for_metadata(topic, partitions)


def load(source: BrokerCluster, messages: int, size: int) -> tuple[int, int]:
    """(records, value bytes) of MESSAGES random records of SIZE bytes."""
    values = [os.urandom(size) for _ in range(1000)]
    with Producer({"metadata.broker.list": source.bootstrap, "producer.type": "async", "batch.size": 1000,
                   "queue.time": 20, "request.required.acks": 1, "queue.buffering.max.messages": 50_000}) as producer:
        for i in range(messages):
            producer.send(ProducerData(TOPIC, b"key-%d" % (i % 10_000), [values[i % 1000]]))
        producer.flush()
    return messages, messages * size


def load_avro(source: BrokerCluster, seconds: float, registry_url: str) -> tuple[int, int]:
    """(events, encoded bytes) the emulator stored in ``seconds`` at full speed."""
    config = EmulatorConfig({"bootstrap.servers": source.bootstrap, "schema.registry.url": registry_url,
                             "rate": 10_000_000, "duration.s": seconds})
    emulator = FrontendEmulator(config)
    emulator.run(threading.Event())
    return total(emulator.metrics.acknowledged), total(emulator.metrics.bytes)


def throughput(target: BrokerCluster, topics: list[str], messages: int, value_bytes: int, partitions: int,
               mirror: MirrorProcess) -> None:
    first = None
    assert mirror.process is not None
    pid = mirror.process.pid
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        if not mirror.running:
            sys.exit(f"mirror exited: {mirror.log_tail()}")
        count = end_total(target, topics, partitions)
        now = time.perf_counter()
        if count and first is None:
            first = (now, count, cpu_seconds(pid))
        if count >= messages:
            break
        time.sleep(0.05)
    assert first is not None
    cpu = cpu_seconds(pid) - first[2]
    elapsed = now - first[0]
    copied = messages - first[1]
    size = value_bytes / messages
    print(f"  throughput: {copied / elapsed:,.0f} records/s, {copied * size / elapsed / MiB:.1f} MB/s of values "
          f"(average {size:.0f} bytes) "
          f"({copied:,} records in {elapsed:.1f} s after the first arrived)", flush=True)
    print(f"  mirror CPU: {cpu * 1e6 / max(1, copied):.1f} us per record ({cpu:.2f} s for {copied:,} records, "
          f"{cpu / elapsed:.2f} cores)", flush=True)


def idle(pid: int, seconds: float) -> None:
    before, started = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    cpu, elapsed = cpu_seconds(pid) - before, time.perf_counter() - started
    print(f"  idle mirror CPU: {100 * cpu / elapsed:.2f}% of a core ({cpu:.2f} s over {elapsed:.0f} s without "
          f"traffic)", flush=True)


def latency(source: BrokerCluster, target: BrokerCluster, size: int, rate: int, seconds: float) -> None:
    arrivals: list[float] = []
    # The first second warms up (the mirror creates the target topic, the reader finds it) and is not counted.
    warm_up = rate
    measured = int(rate * seconds)
    expected = warm_up + measured
    done = threading.Event()

    def consume() -> None:
        config = {"metadata.broker.list": target.bootstrap, "fetch.wait.max.ms": 100, "consumer.timeout.ms": 500}
        with Consumer(config, partitions={(LATENCY_TOPIC, 0): 0}) as consumer:
            while not done.is_set():
                try:
                    for record in consumer:
                        arrivals.append((time.time_ns() - _STAMP.unpack_from(record.value)[0]) / 1e6)
                        if len(arrivals) >= expected:
                            return
                except Exception:
                    continue

    padding = os.urandom(size - _STAMP.size)
    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    with Producer({"metadata.broker.list": source.bootstrap, "request.required.acks": 1}) as producer:
        start = time.perf_counter()
        for i in range(expected):
            pause = start + i / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            producer.send(ProducerData(LATENCY_TOPIC, None, [_STAMP.pack(time.time_ns()) + padding]))
    reader.join(60)
    done.set()
    if len(arrivals) < expected:
        print(f"  latency: only {len(arrivals)} of {expected} records arrived")
        return
    ordered = sorted(arrivals[warm_up:])
    print(f"  latency at {rate} records/s ({measured} records after {warm_up} to warm up): "
          f"p50 {statistics.median(ordered):.1f} ms, "
          f"p99 {ordered[int(len(ordered) * 0.99) - 1]:.1f} ms, max {ordered[-1]:.1f} ms "
          "(source send -> target consumer)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=1000, help="latency phase: records per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency phase: how long (0: no latency phase)")
    parser.add_argument("--avro", action="store_true", help="load the emulators' Avro events instead")
    parser.add_argument("--avro-seconds", type=float, default=5.0, help="--avro: how long the emulator loads")
    parser.add_argument("--audit", action="store_true", help="--avro: the mirror counts its tier-mirror audit")
    parser.add_argument("--idle-seconds", type=float, default=0.0,
                        help="at the end, the mirror's CPU over this long without traffic")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="mirror settings")
    args = parser.parse_args()
    if args.audit and not args.avro:
        parser.error("--audit needs --avro (the audit counts the emulators' events)")
    what = "the emulators' Avro events" if args.avro else f"{args.messages:,} records of {args.size} bytes"
    print(f"mirror bench: {what}, {args.partitions} partitions per topic, one source and one target broker, "
          f"one mirror process{' with its audit' if args.audit else ''}")
    topics = list(EVENT_TOPICS) if args.avro else [TOPIC]
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as tmp, contextlib.ExitStack() as stack:
        zookeeper = stack.enter_context(ZooKeeperServer(Path(tmp) / "zk"))
        base = zookeeper.connect_string
        source = stack.enter_context(BrokerCluster(Path(tmp) / "src", base + "/src", 1))
        target = stack.enter_context(BrokerCluster(Path(tmp) / "dst", base + "/dst", 1))
        registry = stack.enter_context(RegistryProcess(Path(tmp) / "registry.log", data_dir=Path(tmp) / "registry")) \
            if args.avro else None
        started = time.perf_counter()
        create_topics(source, topics, args.partitions)
        messages, value_bytes = (load_avro(source, args.avro_seconds, registry.url) if registry is not None
                                 else load(source, args.messages, args.size))
        print(f"  loaded {messages:,} records into the source in {time.perf_counter() - started:.1f} s", flush=True)
        settings = [item for pair in args.set for item in ("--set", pair)]
        audit = ["--registry", registry.url] if args.audit and registry is not None else ["--no-audit"]
        mirror = MirrorProcess(Path(tmp) / "mirror.log",
                               ["--source", f"src={source.zk_connect}", "--target", target.zk_connect,
                                "--whitelist", ",".join([*topics, LATENCY_TOPIC]), *audit, *settings]).start()
        try:
            throughput(target, topics, messages, value_bytes, args.partitions, mirror)
            if args.seconds > 0:
                latency(source, target, args.size, args.rate, args.seconds)
            if args.idle_seconds > 0:
                assert mirror.process is not None
                idle(mirror.process.pid, args.idle_seconds)
            if mirror.stop() != 0:
                print(mirror.log_tail())
        finally:
            mirror.kill()


if __name__ == "__main__":
    main()
