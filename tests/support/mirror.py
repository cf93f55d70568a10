"""Mirror tests: two source clusters and one target on one ZooKeeper, mirror processes, reading back.

Each cluster is one cluster-mode broker on its own chroot of the session's ZooKeeper (the machine has two
cores; the mirror's logic does not depend on the number of brokers). ``MirrorProcess`` runs
``python -m mirror`` from the repo root on the process harness, its output in a log file; ``stop`` is SIGTERM,
``kill`` SIGKILL.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from pipeline.client.admin import AdminClient
from pipeline.client.consumer import ConsumerRecord
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.zk import layout
from pipeline.lineage import LINEAGE_HEADERS, Lineage, lineage_of
from schemas.events import AUDIT_TOPIC
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder
from tests.support.cluster import BrokerCluster
from tests.support.polling import wait_until
from tests.support.process import ChildProcess, python_env, python_module
from tests.support.zookeeper import unique_chroot

BROKER_OVERRIDES = {"zookeeper.session.timeout.ms": 4000, "num.partitions": 1}


def start_clusters(zookeeper_server: Any, factory: Callable[..., BrokerCluster],
                   overrides: dict[str, dict[str, object]] | None = None) -> dict[str, BrokerCluster]:
    """dc1, dc2 and offline: one broker each, on chroots of the session's ZooKeeper."""
    base = zookeeper_server.connect_string
    return {name: factory(base + unique_chroot(name), size=1,
                          overrides={**BROKER_OVERRIDES, **(overrides or {}).get(name, {})})
            for name in ("dc1", "dc2", "offline")}


class MirrorProcess:
    """One ``python -m mirror`` child process on the process harness."""

    def __init__(self, log_path: Path, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.log_path = Path(log_path)
        self.args = list(args)
        self.env = dict(env or {})
        self.child = ChildProcess("mirror", python_module("mirror", *self.args), self.log_path, announce=True,
                                  error=AssertionError)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.child.process

    def start(self) -> "MirrorProcess":
        self.child.env = python_env(self.env)
        self.child.spawn()
        return self

    @property
    def running(self) -> bool:
        return self.child.running

    def wait(self, timeout: float = 60.0) -> int:
        return self.child.wait(timeout)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; the exit code (AssertionError with the log tail, the mirror killed, past ``timeout``)."""
        return self.child.stop(timeout)

    def kill(self) -> None:
        self.child.kill()

    def alive(self) -> bool:
        """True while running; AssertionError with the log's tail once it exited (for polled conditions)."""
        if not self.running:
            raise AssertionError(f"mirror exited with {self.child.returncode}:\n{self.log_tail()}")
        return True

    def log_text(self) -> str:
        return self.child.log_text()

    def log_tail(self, lines: int = 40) -> str:
        return self.child.log_tail(lines)


def mirror_until_committed(log_path: Path, args: Sequence[str], source: BrokerCluster, topic: str,
                           offsets: dict[int, int]) -> None:
    """Run a mirror until ``source`` has ``offsets`` (partition -> offset) committed for ``topic``, then SIGTERM
    it; AssertionError unless it exits 0."""
    mirror = MirrorProcess(log_path, args).start()
    try:
        wait_until(lambda: mirror.alive()
                   and all(committed(source, "mirror", topic, p) == o for p, o in offsets.items()),
                   60, interval=0.1, message=f"{topic} committed up to {offsets}")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()


def mirror_error(log_path: Path, args: Sequence[str]) -> tuple[MirrorProcess, str]:
    """Run a mirror that must stop on an error by itself: the process and its one error line."""
    mirror = MirrorProcess(log_path, args).start()
    try:
        assert mirror.wait(60) == 1, mirror.log_tail()
    finally:
        mirror.kill()
    errors = [line for line in mirror.log_text().splitlines() if line.startswith("python -m mirror: error:")]
    assert len(errors) == 1 and "Traceback" not in mirror.log_text(), mirror.log_tail()
    return mirror, errors[0]


def mirror_args(sources: dict[str, BrokerCluster], target: BrokerCluster, whitelist: str, *extra: str) -> list[str]:
    """Command-line arguments of a mirror of ``sources`` into ``target`` (no audit, fast commits)."""
    args = []
    for name, cluster in sorted(sources.items()):
        args += ["--source", f"{name}={cluster.zk_connect}"]
    return [*args, "--target", target.zk_connect, "--whitelist", whitelist, "--no-audit",
            "--set", "offset.commit.interval.ms=200", "--set", "consumer.zookeeper.session.timeout.ms=4000",
            *extra]


def create_topic(cluster: BrokerCluster, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics(topic, partitions=partitions, configs=configs)
    cluster.wait_for_metadata(topic, partitions)


def produce(cluster: BrokerCluster, topic: str, records: Iterable[tuple[bytes, bytes, int, list]]) -> int:
    """Send (key, value, timestamp, headers) records keyed (murmur2) with acks=all; the count."""
    count = 0
    with Producer({"zookeeper.connect": cluster.zk_connect, "request.required.acks": -1, "producer.type": "async",
                   "queue.time": 5, "batch.size": 500}) as producer:
        for key, value, timestamp, headers in records:
            producer.send(ProducerData(topic, key, [value], timestamps=[timestamp], headers=[headers]))
            count += 1
        producer.flush()
    return count


def read_all(cluster: BrokerCluster, topic: str, partitions: int) -> dict[int, list[ConsumerRecord]]:
    """Every record of every partition of ``topic``, in offset order."""
    broker = next(iter(cluster.brokers.values()))
    result: dict[int, list[ConsumerRecord]] = {}
    with SimpleConsumer(broker.host, broker.port) as consumer:
        for partition in range(partitions):
            records: list[ConsumerRecord] = []
            offset = consumer.get_offsets_before(topic, partition, -2, 1)[0]
            while True:
                batch = list(consumer.fetch(FetchRequest(topic, partition, offset, 4 << 20)))
                if not batch:
                    break
                records.extend(ConsumerRecord(topic, partition, *r) for r in batch if r.offset >= offset)
                offset = batch[-1].offset + 1
            result[partition] = records
    return result


def read_committed(cluster: BrokerCluster, topic: str, partitions: int) -> dict[int, list[ConsumerRecord]]:
    """Every record of every partition of ``topic`` a read_committed reader sees, up to the last stable offset, in
    offset order (aborted transactions and markers left out)."""
    result: dict[int, list[ConsumerRecord]] = {}
    for partition in range(partitions):
        broker = cluster.brokers[cluster.partition_state(topic, partition)["leader"]]
        with SimpleConsumer(broker.host, broker.port, isolation_level="read_committed") as consumer:
            records: list[ConsumerRecord] = []
            offset = consumer.get_offsets_before(topic, partition, -2, 1)[0]
            end = consumer.get_offsets_before(topic, partition, -1, 1)[0]
            while offset < end:
                messages = consumer.fetch(FetchRequest(topic, partition, offset, 4 << 20))
                records.extend(ConsumerRecord(topic, partition, *r) for r in messages if r.offset >= offset)
                assert messages.next_offset > offset, f"{topic}-{partition}: read_committed stuck at {offset} < {end}"
                offset = messages.next_offset
            result[partition] = records
    return result


def end_offsets(cluster: BrokerCluster, topic: str, partitions: int) -> dict[int, int]:
    broker = next(iter(cluster.brokers.values()))
    with SimpleConsumer(broker.host, broker.port) as consumer:
        return {p: consumer.get_offsets_before(topic, p, -1, 1)[0] for p in range(partitions)}


def target_count(target: BrokerCluster, topic: str, partitions: int) -> int:
    try:
        return sum(end_offsets(target, topic, partitions).values())
    except Exception:
        return 0


def lineages(records: dict[int, list[ConsumerRecord]]) -> list[tuple[int, int, Lineage]]:
    """(target partition, target offset, lineage) of every target record; AssertionError for one without."""
    found = []
    for partition, items in records.items():
        for record in items:
            lineage = lineage_of(record.topic, record.headers)
            assert lineage is not None, f"target record {record} has no lineage"
            found.append((partition, record.offset, lineage))
    return found


def own_headers(record: ConsumerRecord) -> list:
    return [h for h in record.headers if h[0] not in LINEAGE_HEADERS]


def committed(cluster: BrokerCluster, group: str, topic: str, partition: int) -> int | None:
    path = layout.offset_path(group, topic, partition)
    if cluster.zk.exists(path) is None:
        return None
    return int(cluster.zk.get(path)[0])


def wait_for_count(target: BrokerCluster, topic: str, partitions: int, at_least: int, mirrors: Sequence[MirrorProcess],
                   timeout: float = 60.0) -> int:
    def enough() -> int:
        for mirror in mirrors:
            mirror.alive()
        count = target_count(target, topic, partitions)
        return count if count >= at_least else 0
    return wait_until(enough, timeout, interval=0.2,
                      message=lambda: f"{at_least} records in the target (have "
                                      f"{target_count(target, topic, partitions)})")


def audit_tier_counts(records: Iterable[ConsumerRecord], registry_url: str, tier: str) -> Counter:
    """(datacenter, topic, window start ms) -> count over the AuditCount ``records`` of ``tier``."""
    client = SchemaRegistryClient(registry_url)
    try:
        decoder = AvroDecoder(client)
        counts = [decoder.decode(r.value, AUDIT_TOPIC) for r in records]
    finally:
        client.close()
    found: Counter = Counter()
    for c in counts:
        if c["tier"] == tier and c["count"]:
            found[(c["datacenter"], c["topic"], int(c["windowStart"].timestamp() * 1000))] += c["count"]
    return found
