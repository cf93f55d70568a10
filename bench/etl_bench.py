"""ETL throughput: one run of the ETL (Spark local[2]) loading N emulator events from an offline cluster.

A ZooKeeper, one broker (the offline cluster) and a standalone schema registry on this machine. N events of
the frontend emulators' workload (producers.workload: page views, clicks, searches, service calls, ...; one
topic per event type, PARTITIONS partitions each) are Avro-encoded and stored first (lz4 batches); then one
ETL run loads them all into a fresh warehouse. Reported: rows/s and MB/s of the run (message bytes over its
whole duration: recovery, planning, the SparkSession's start, loading, publishing, commit), the time from the
run's start to its first task, and the peak memory of this process tree (driver, Spark JVM, Python workers:
the sum of their RSS, sampled every 100 ms).

    .venv/bin/python -m bench.etl_bench [--events 1000000] [--partitions 2] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from etl.config import EtlConfig
from etl.job import run_once
from pyspark.sql import SparkSession

from pipeline.client.admin import AdminClient
from pipeline.client.producer import Producer, ProducerData
from pipeline.zk.server import ZooKeeperServer
from producers.workload import Workload
from schemas.events import EVENT_TOPICS, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support.cluster import BrokerCluster
from tests.support.registry import RegistryProcess

MB = 1_000_000
_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * _PAGE
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


class PeakMemory:
    """Samples the RSS of this process tree in a thread; ``peak`` is the largest sum seen."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.peak = max(self.peak, tree_rss(os.getpid()))


def load_events(offline: BrokerCluster, registry_url: str, events: int, partitions: int) -> tuple[int, int]:
    """Store ``events`` emulator events (and the metrics events due with them); (records, value bytes)."""
    with AdminClient(offline.bootstrap) as admin:
        for topic in EVENT_TOPICS:
            admin.create_topics(topic, partitions=partitions)
    for topic in EVENT_TOPICS:
        offline.wait_for_metadata(topic, partitions)
    workload = Workload("dc1", 20)
    stored = size = 0
    with SchemaRegistryClient(registry_url) as registry:
        encoder = AvroEncoder(registry, {topic: load_schema(name) for topic, name in EVENT_TOPICS.items()})
        with Producer({"metadata.broker.list": offline.bootstrap, "producer.type": "async", "batch.size": 2000,
                       "queue.time": 50, "request.required.acks": 1, "compression.codec": "lz4",
                       "queue.buffering.max.messages": 100_000}) as producer:
            now_ms = 1_700_000_000_000
            while stored < events:
                batch = workload.next_events(now_ms, min(5000, events - stored))
                now_ms += 1000
                by_topic: dict[str, list] = {}
                for event in batch:
                    by_topic.setdefault(event.topic, []).append(event)
                for topic, items in by_topic.items():
                    values = encoder.encode_for(topic, [e.value for e in items])
                    size += sum(len(v) for v in values)
                    for event, value in zip(items, values):
                        producer.send(ProducerData(topic, event.key, [value]))
                stored += len(batch)
            producer.flush()
    return stored, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="emulator events to load (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=2, help="partitions per topic")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etl-bench-") as tmp:
        work = Path(tmp)
        with ZooKeeperServer(work / "zookeeper") as zookeeper, \
                BrokerCluster(work / "offline", zookeeper.connect_string + "/offline", 1,
                              {"num.partitions": 1}) as offline, \
                RegistryProcess(work / "registry.log", data_dir=work / "registry") as registry:
            started = time.monotonic()
            records, size = load_events(offline, registry.url, args.events, args.partitions)
            print(f"stored {records:,} events ({size / MB:.1f} MB of Avro values) in "
                  f"{time.monotonic() - started:.1f}s")
            # The events are of 2023: without these the run's upkeep would compact and then expire what it loaded.
            config = EtlConfig({"zookeeper.connect": offline.zk_connect, "warehouse.dir": str(work / "warehouse"),
                                "schema.registry.url": registry.url, "spark.master": args.master,
                                "audit.enable": "false", "warehouse.retention": "0", "compaction.enable": "false"})
            with PeakMemory() as memory:
                try:
                    report = run_once(config)  # builds its SparkSession, as `python -m etl load` does
                finally:
                    session = SparkSession.getActiveSession()
                    if session is not None:
                        session.stop()
            duration = report.duration_s or 0.0
            loading = duration - (report.first_task_s or 0.0)
            print(f"etl run ({args.master}): {report.rows:,} rows, {len(report.ranges)} ranges in {duration:.1f}s: "
                  f"{report.rows / duration:,.0f} rows/s, {report.bytes / MB / duration:.1f} MB/s of messages "
                  f"({report.rows / loading:,.0f} rows/s, {report.bytes / MB / loading:.1f} MB/s from the first "
                  f"task on); first task {report.first_task_s:.1f}s after the run's start; "
                  f"peak memory {memory.peak / (1 << 20):,.0f} MiB (driver + Spark JVM + Python workers)", flush=True)


if __name__ == "__main__":
    main()
