"""ETL throughput: one run of the ETL (Spark local[2]) loading N emulator events from an offline cluster.

A ZooKeeper, one broker (the offline cluster) and a standalone schema registry on this machine. N events of
the frontend emulators' workload (producers.workload: page views, clicks, searches, service calls, ...; one
topic per event type, PARTITIONS partitions each) are Avro-encoded and stored first (lz4 batches); then one
ETL run loads them all into a fresh warehouse. Reported: rows/s and MB/s of the run (message bytes over its
whole duration: recovery, planning, the SparkSession's start, loading, publishing, commit), the time from the
run's start to its first task, the peak memory of this process tree (driver, Spark JVM, Python workers:
the sum of their RSS, sampled every 100 ms), and the CPU the run used per row: the driver's own (from
getrusage, over the run) and the Spark JVM's with its Python workers (from /proc, the JVM started with the run),
the figure to compare across changes on a busy machine.

    .venv/bin/python -m bench.etl_bench [--events 1000000] [--partitions 2] [--master local[2]] [--task-cpu 3] [--idle 60]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from etl.config import EtlConfig
from etl.job import run_once
from pyspark.sql import SparkSession

from pipeline.client.admin import AdminClient
from pipeline.client.producer import Producer, ProducerData
from pipeline.zk.server import ZooKeeperServer
from producers.workload import Workload
from schemas.events import EVENT_TOPICS, load_schema, subject_for
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support.cluster import BrokerCluster
from tests.support.registry import RegistryProcess

MB = 1_000_000
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


def _tree_sum(root: int, of_stat: Callable[[list[str]], float]) -> float:
    """The sum of ``of_stat`` (given the fields of /proc/PID/stat after the command name) over ``root`` and all
    its descendants."""
    return sum(_tree_values(root, of_stat).values())


def _tree_values(root: int, of_stat: Callable[[list[str]], float]) -> dict[int, float]:
    """``of_stat`` of ``root`` and of each of its descendants, by pid."""
    children: dict[int, list[int]] = {}
    values: dict[int, float] = {}
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
        values[pid] = of_stat(fields)
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in values:
            found[pid] = values[pid]
        todo.extend(children.get(pid, []))
    return found


def tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and all its descendants."""
    return int(_tree_sum(root, lambda fields: int(fields[21]) * _PAGE))


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user and system) used by ``root`` and all its descendants, those they reaped included."""
    return _tree_sum(root, lambda fields: sum(int(f) for f in fields[11:15]) / _TICKS)


def spark_jvm_pid() -> int | None:
    """The pid of the Spark JVM this process started (PySpark's gateway), None if there is none."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    return None if process is None else process.pid


class PeakMemory:
    """Samples the RSS of this process tree in a thread; ``peak`` is the largest sum seen."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.peak = 0
        #: CPU seconds this sampling took (to be left out of the driver's).
        self.cpu_s = 0.0
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
            self.cpu_s = time.thread_time()


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


def task_cpu(config: EtlConfig, repeat: int) -> None:
    """Run the Spark task's function (etl.task.load_ranges) in this process on every stored range, no Spark:
    fetch, decode, rows, Arrow batches; print its CPU per row (best of ``repeat``)."""
    import json

    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from etl.commit import OfflineCluster
    from etl.load import table_schema
    from etl.task import TaskContext, load_ranges

    offline = OfflineCluster(config)
    try:
        bounds = offline.bounds(config["topics"], config["exclude.topics"])
        brokers = offline.brokers()
    finally:
        offline.close()
    with SchemaRegistryClient(config["schema.registry.url"]) as registry:
        readers = {topic: registry.latest(subject_for(topic))[2].text for topic, _ in bounds}
    best, rows = float("inf"), 0
    for _ in range(repeat):
        used = 0.0
        rows = 0
        for index, ((topic, partition), bound) in enumerate(sorted(bounds.items())):
            context = TaskContext(topic, brokers, config["schema.registry.url"], readers[topic], config["fetch.size"],
                                  False)
            target = to_arrow_schema(table_schema(json.loads(readers[topic])), timezone="UTC")
            ranges = pa.RecordBatch.from_pylist([{"index": index, "partition": partition, "start": bound.log_start,
                                                  "end": bound.latest}])
            started = time.process_time()
            for batch in load_ranges(context, config["audit.window.ms"], _Stats(), target, iter([ranges])):
                rows += batch.num_rows
            used += time.process_time() - started
        best = min(best, used)
    print(f"etl task in process (no Spark): {rows:,} rows, {best / max(rows, 1) * 1e6:.2f} us/row of CPU "
          f"(best of {repeat}: fetch, decode, rows, Arrow batches cast to the table's types)", flush=True)


class _Stats:
    """What load_ranges reports to (Spark's accumulator in a job)."""

    def add(self, value: dict) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="emulator events to load (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=2, help="partitions per topic")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                        help="after the run keep its SparkSession SECONDS with nothing to do and print the CPU it used")
    parser.add_argument("--no-spark", action="store_true", help="no ETL run (with --task-cpu: that figure only)")
    parser.add_argument("--task-cpu", type=int, default=0, metavar="REPEAT",
                        help="also run the task's function in this process REPEAT times, no Spark, and print its "
                             "CPU per row (best of them)")
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
            driver_before = _own_cpu_s()
            if args.task_cpu:
                task_cpu(config, args.task_cpu)
            if args.no_spark:
                return
            with PeakMemory() as memory:
                try:
                    report = run_once(config)  # builds its SparkSession, as `python -m etl load` does
                    driver_s = _own_cpu_s() - driver_before - memory.cpu_s
                    jvm = spark_jvm_pid()
                    spark_s = tree_cpu_s(jvm) if jvm is not None else 0.0
                    if args.idle:
                        idle(args.idle, jvm, memory)
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
            rows = max(report.rows, 1)
            print(f"cpu of the run: {(driver_s + spark_s) / rows * 1e6:.1f} us/row ({driver_s + spark_s:.1f} s: "
                  f"driver {driver_s:.1f} s, Spark JVM + Python workers {spark_s:.1f} s)", flush=True)


def idle(seconds: float, jvm: int | None, memory: PeakMemory) -> None:
    """Keep the run's SparkSession up ``seconds`` with nothing to do (as the ETL service between runs) and print
    the CPU the driver (less ``memory``'s sampling) and the Spark JVM with its Python workers used meanwhile."""
    def own_cpu_s(fields: list[str]) -> float:
        return (int(fields[11]) + int(fields[12])) / _TICKS

    driver, before = _own_cpu_s() - memory.cpu_s, _tree_values(jvm, own_cpu_s) if jvm is not None else {}
    time.sleep(seconds)
    driver = _own_cpu_s() - memory.cpu_s - driver
    after = _tree_values(jvm, own_cpu_s) if jvm is not None else {}
    # Only the processes alive throughout: Spark stops Python workers idle for a minute (what they used is gone).
    spark = sum(after[pid] - before[pid] for pid in before.keys() & after.keys())
    print(f"idle between runs ({seconds:.0f} s, the session kept): {(driver + spark) / seconds * 100:.2f}% of a core "
          f"(driver {driver / seconds * 100:.2f}%, Spark JVM + Python workers {spark / seconds * 100:.2f}%)",
          flush=True)


def _own_cpu_s() -> float:
    """CPU seconds of this process (its threads), not of its children."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
