"""One run of the ETL: recover, plan, load, publish, commit, audit, and record what it did.

    recover   journals of dead runs are rolled forward (moves, manifest, then the steps after it);
              staging and plans of runs that died before publishing are discarded
    plan      ranges from the manifests' ends to the latest offsets (etl.plan), written before any data is read
    load      one Spark task per range into the run's staging directory (etl.load, etl.task)
    publish   a journal of the moves and the manifest, fsynced; the moves; the manifest (the commit point)
    commit    the offsets to /consumers/GROUP/offsets/TOPIC/PARTITION in ZooKeeper, for consumers who look there
    audit     tier-warehouse AuditCount records: rows per topic, datacenter and event-time window
    finish    the journal, staging and plan removed

Every run, failed or with nothing new, is recorded in the run history before ``run_once`` returns or raises.
"""

from __future__ import annotations

import base64
import logging
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
import time
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from prometheus_client import CollectorRegistry, Counter
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from audit.counting import AuditPublisher
from audit.latency import LatencyBuckets
from audit.sketch import EventSketch
from etl.config import EtlConfig
from etl.faults import pause_at
from etl.history import RunHistory
from etl.load import ColumnClash, load_topic, staged_moves
from etl.plan import EtlError, OffsetRange, PartitionBounds, loaded_ends, plan_ranges
from etl.report import FAILED, NOTHING_NEW, SUCCEEDED, RangeReport, RunReport, SkippedOffsets
from etl.store import Journal, Manifest, RunInProgress, Warehouse, fsync_file, new_run_id
from etl.task import TASK_ERROR, StatsParam, TaskContext
from mirror.config import topic_filter
from pipeline.client.admin import EARLIEST_TIMESTAMP, AdminClient
from pipeline.client.cluster import Cluster
from pipeline.client.errors import KafkaClientError
from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.zk import layout
from pipeline.zk.client import BoundedZooKeeper, connect
from schemas.events import subject_for
from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError

__all__ = ["EtlError", "LockLost", "WAREHOUSE_TIER", "run_once"]

log = logging.getLogger(__name__)

WAREHOUSE_TIER = "warehouse"
ZOOKEEPER_STEP = "zookeeper"
AUDIT_STEP = "audit"
_AUDIT_TIMEOUT_S = 30.0
_PROGRESS_INTERVAL_S = 0.5


class LockLost(EtlError):
    """The scheduler's lock was lost during the run: it stopped before the next step (publish or commit)."""


class _Offline:
    """The offline cluster: its ZooKeeper session, metadata, and offset look-ups."""

    def __init__(self, config: EtlConfig) -> None:
        self.zk: KazooClient = connect(config["zookeeper.connect"])
        self.discovery = ZooKeeperBrokerDiscovery(self.zk)
        self.cluster = Cluster(self.discovery, client_id="etl")
        self.admin = AdminClient(self.cluster)

    def close(self) -> None:
        self.cluster.close()
        self.discovery.close()
        self.zk.stop()
        self.zk.close()

    def bounds(self, topics_regex: str, exclude_regex: str) -> dict[tuple[str, int], PartitionBounds]:
        wanted = topic_filter(topics_regex, exclude_regex).select(self.admin.list_topics())
        bounds = {}
        for topic in wanted:
            earliest = self.admin.list_offsets(topic, None, EARLIEST_TIMESTAMP)
            latest = self.admin.list_offsets(topic)
            for partition, end in latest.items():
                start = earliest.get(partition)
                end = 0 if end is None else end
                bounds[(topic, partition)] = PartitionBounds(end if start is None else start, end)
        return bounds

    def brokers(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in sorted(self.cluster.brokers().values()))

    def commit_offsets(self, group: str, manifest: Manifest) -> None:
        """Write where the manifest's ranges end to /consumers/GROUP/offsets/TOPIC/PARTITION (idempotent)."""
        zk = BoundedZooKeeper(self.zk, 15.0)
        for (topic, partition), end in sorted(loaded_ends([*manifest.ranges, *manifest.skipped]).items()):
            path = layout.offset_path(group, topic, partition)
            data = str(end).encode()
            if zk.exists(path) is None:
                zk.ensure_path(path)
            zk.set(path, data)
            pause_at("committing")


def _audit_records(manifest_run: str, topic_windows: dict[tuple[str, str, int], list[Any]],
                   window_ms: int) -> list[dict[str, Any]]:
    """The run's AuditCount records as the manifest keeps them (JSON: the sketch in base64)."""
    host = f"etl-{socket.gethostname()}"
    return [{"topic": topic, "tier": WAREHOUSE_TIER, "windowStart": start, "windowEnd": start + window_ms,
             "host": host, "datacenter": datacenter, "application": "etl", "count": count, "bytes": size,
             "sketch": None if sketch is None else base64.b64encode(sketch.to_bytes()).decode(),
             "properties": {"run": manifest_run, "latency": latency.to_text()}}
            for (topic, datacenter, start), (count, size, sketch, latency) in sorted(topic_windows.items())]


def _publish_audit(config: EtlConfig, records: list[dict[str, Any]]) -> None:
    if not records:
        return
    metrics = CollectorRegistry()
    registry = SchemaRegistryClient(config["schema.registry.url"])
    publisher = AuditPublisher({"zookeeper.connect": config["zookeeper.connect"], "request.required.acks": -1},
                               registry, config["audit.topic"],
                               published=Counter("etl_audit_published", "", registry=metrics),
                               failures=Counter("etl_audit_failures", "", registry=metrics))
    try:
        try:
            publisher.start()
        except BaseException:
            publisher.producer.close()
            raise
        publisher.publish([{**r, "sketch": None if r.get("sketch") is None else base64.b64decode(r["sketch"])}
                           for r in records])
        left = publisher.close(_AUDIT_TIMEOUT_S)
    finally:
        registry.close()
    if left:
        raise EtlError(f"{left} of {len(records)} audit counts could not be published to {config['audit.topic']} "
                       f"(the data is committed; the next run publishes them)")


class _Run:
    """The state of one run while it goes through its steps."""

    def __init__(self, config: EtlConfig, spark: SparkSession | Callable[[], SparkSession] | None,
                 on_progress: Callable[[RunReport], None] | None, still_locked: Callable[[], bool] | None) -> None:
        self.config = config
        self._spark = spark
        self.on_progress = on_progress
        self.still_locked = still_locked
        self.group = config["group.id"]
        self.warehouse = Warehouse(config.warehouse, self.group)
        started = time.time()
        self.report = RunReport(new_run_id(started), self.group, started)
        self.ranges: list[OffsetRange] = []

    # -- the steps -------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            with self.warehouse.exclusive():
                try:
                    self.run_alone()
                except BaseException:
                    self.discard_unpublished()
                    raise
        except RunInProgress as error:
            raise EtlError(str(error)) from None

    def run_alone(self) -> None:
        offline = _Offline(self.config)
        try:
            self.recover(offline)
            bounds = offline.bounds(self.config["topics"], self.config["exclude.topics"])
            self.ranges, skipped = plan_ranges(bounds, self.warehouse.loaded(), self.config["max.range.records"],
                                               self.config["out.of.range"])
            report = self.report
            report.ranges = [RangeReport(r.topic, r.partition, r.start, r.end) for r in self.ranges]
            report.skipped = skipped
            if not self.ranges and not skipped:
                return
            self.warehouse.write_plan(report.run_id, self.ranges, skipped)
            log.info("run %s: %d ranges of %d offsets planned%s", report.run_id, len(self.ranges),
                     sum(r.count for r in self.ranges),
                     f", {sum(s.count for s in skipped)} offsets skipped" if skipped else "")
            self.progress()
            stats = self.load(offline) if self.ranges else {}
            manifest = self.manifest(stats)
            self.check_lock("publishing")
            journal = Journal(manifest)
            self.warehouse.write_journal(journal)
            self.warehouse.publish(journal)
            pause_at("published")
            self.complete(offline, journal)
        finally:
            offline.close()

    def recover(self, offline: _Offline) -> None:
        warehouse = self.warehouse
        warehouse.remove_strays()
        for journal in warehouse.journals_pending():
            log.warning("run %s stopped after it began publishing; completing it", journal.manifest.run_id)
            warehouse.publish(journal)
            self.complete(offline, journal)
        for run_id in warehouse.abandoned_runs():
            log.warning("run %s died before publishing; discarding its staging", run_id)
            warehouse.discard(run_id)

    def complete(self, offline: _Offline, journal: Journal) -> None:
        """The steps after a manifest: the ZooKeeper commit and the audit (those not done yet), then cleanup."""
        manifest = journal.manifest
        if ZOOKEEPER_STEP not in journal.steps:
            self.check_lock("committing")
            offline.commit_offsets(self.group, manifest)
            self.warehouse.step_done(journal, ZOOKEEPER_STEP)
        if AUDIT_STEP not in journal.steps:
            if self.config["audit.enable"]:
                _publish_audit(self.config, manifest.audit)
            self.warehouse.step_done(journal, AUDIT_STEP)
        self.warehouse.finish(manifest.run_id)

    def discard_unpublished(self) -> None:
        """After a failure: the run's staging and plan, unless its publish began (recovery completes that)."""
        run_id = self.report.run_id
        if not self.warehouse.journal_path(run_id).exists():
            self.warehouse.discard(run_id)

    def check_lock(self, step: str) -> None:
        if self.still_locked is not None and not self.still_locked():
            raise LockLost(f"the scheduler's lock was lost; stopped before {step}")

    # -- loading ---------------------------------------------------------------------------------------

    def session(self) -> SparkSession:
        """The run's SparkSession, started only now that there is something to load (a JVM takes seconds)."""
        if self._spark is None:
            from etl.spark import build_session
            self._spark = build_session(self.config)
        elif not isinstance(self._spark, SparkSession):
            self._spark = self._spark()
        return self._spark

    def reader_schemas(self) -> dict[str, str]:
        """The reader schema (JSON text) of every topic with ranges: its subject's latest version."""
        readers = {}
        with SchemaRegistryClient(self.config["schema.registry.url"]) as registry:
            for topic, _, _ in self.by_topic():
                try:
                    readers[topic] = registry.latest(subject_for(topic))[2].text
                except SchemaRegistryError as error:
                    raise EtlError(f"topic {topic}: no reader schema (subject {subject_for(topic)}): "
                                   f"{error}") from None
        return readers

    def load(self, offline: _Offline) -> dict[int, dict[str, Any]]:
        readers = self.reader_schemas()
        spark = self.session()
        accumulator = spark.sparkContext.accumulator({}, StatsParam())
        brokers = offline.brokers()
        watcher_stop = threading.Event()
        watcher = threading.Thread(target=self.watch, args=(accumulator, watcher_stop), name="etl-progress",
                                   daemon=True)
        watcher.start()
        try:
            self.load_topics(spark, readers, brokers, accumulator)
        finally:
            watcher_stop.set()
            watcher.join()
        stats = dict(accumulator.value)
        self.apply(stats)
        missing = [str(self.ranges[i]) for i in range(len(self.ranges)) if i not in stats]
        if missing:
            raise EtlError(f"no task reported loading {', '.join(missing)}")
        return stats

    def load_topics(self, spark: SparkSession, readers: dict[str, str], brokers: str, accumulator: Any) -> None:
        """One Spark job per topic, up to concurrent.topics at once (their tasks share the executors); the
        first to fail cancels the others and is the run's error."""
        staging = self.warehouse.staging_dir(self.report.run_id)

        def load(topic: str, first: int, ranges: list[OffsetRange]) -> None:
            context = TaskContext(topic, brokers, self.config["schema.registry.url"], readers[topic],
                                  self.config["fetch.size"], self.config["out.of.range"] == "earliest")
            spark.sparkContext.setJobGroup(self.report.run_id, f"etl run {self.report.run_id}: {topic}")
            try:
                load_topic(spark, context, ranges, first, staging / topic, self.config["audit.window.ms"],
                           accumulator)
            except ColumnClash as error:
                raise EtlError(str(error)) from None
            except (Py4JError, PySparkException) as error:
                raise EtlError(_spark_error(topic, error)) from None

        failure: EtlError | None = None
        with ThreadPoolExecutor(self.config["concurrent.topics"], thread_name_prefix="etl-topic") as pool:
            for done in as_completed([pool.submit(load, *item) for item in self.by_topic()]):
                error = done.exception()
                if error is not None and failure is None:
                    failure = error if isinstance(error, EtlError) else EtlError(str(error))
                    spark.sparkContext.cancelJobGroup(self.report.run_id)
        if failure is not None:
            raise failure

    def by_topic(self) -> list[tuple[str, int, list[OffsetRange]]]:
        groups: list[tuple[str, int, list[OffsetRange]]] = []
        for index, r in enumerate(self.ranges):
            if not groups or groups[-1][0] != r.topic:
                groups.append((r.topic, index, []))
            groups[-1][2].append(r)
        return groups

    def watch(self, accumulator: Any, stop: threading.Event) -> None:
        seen = 0
        while not stop.wait(_PROGRESS_INTERVAL_S):
            stats = dict(accumulator.value)
            if len(stats) != seen:
                seen = len(stats)
                self.apply(stats)
                self.progress()

    def apply(self, stats: dict[int, dict[str, Any]]) -> None:
        report = self.report
        for index, s in stats.items():
            report.ranges[index].rows, report.ranges[index].bytes = s["rows"], s["bytes"]
        if stats:
            report.first_task_s = max(0.0, min(s["started"] for s in stats.values()) - report.started_at)

    def progress(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.report)

    def manifest(self, stats: dict[int, dict[str, Any]]) -> Manifest:
        run_id = self.report.run_id
        files = []
        for topic, first, ranges in self.by_topic():
            files += staged_moves(self.warehouse.root, self.warehouse.staging_dir(run_id) / topic, topic, ranges,
                                  first)
        windows: dict[tuple[str, str, int], list[Any]] = {}
        skipped = list(self.report.skipped)
        range_stats = {}
        for index, s in sorted(stats.items()):
            topic = self.ranges[index].topic
            range_stats[index] = (s["rows"], s["bytes"])
            for datacenter, start, count, size, sketch, latency in s["windows"]:
                counts = windows.setdefault((topic, datacenter, start), [0, 0, None, LatencyBuckets()])
                counts[0] += count
                counts[1] += size
                counts[3].merge(LatencyBuckets.from_text(latency))
                if sketch is not None:
                    found = EventSketch.from_bytes(base64.b64decode(sketch))
                    counts[2] = found if counts[2] is None else counts[2] + found
            partition = self.ranges[index].partition
            skipped += [SkippedOffsets(topic, partition, a, b) for a, b in s["skipped"]]
        written = {}
        for move in files:
            written[move.range_index] = written.get(move.range_index, 0) + move.rows
        for index, (rows, _) in range_stats.items():
            if written.get(index, 0) != rows:
                raise EtlError(f"{self.ranges[index]}: the task loaded {rows} rows but {written.get(index, 0)} "
                               f"were staged")
        self.report.skipped = skipped
        for path in {self.warehouse.root / m.staged for m in files}:
            fsync_file(path)
        return Manifest(run_id, self.ranges, files, skipped,
                        _audit_records(run_id, windows, self.config["audit.window.ms"]), range_stats)


def _spark_error(topic: str, error: BaseException) -> str:
    text = str(error)
    found = re.search(re.escape(TASK_ERROR) + r"(.*)", text)
    if found:
        return found.group(1).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return f"loading {topic} failed in Spark: {first}"


def run_once(config: EtlConfig, spark: SparkSession | Callable[[], SparkSession] | None = None, *,
             on_progress: Callable[[RunReport], None] | None = None,
             still_locked: Callable[[], bool] | None = None) -> RunReport:
    """Plan, load, publish and commit one run; record it in the run history and return its report.

    ``spark`` is the session to load with, or a function giving it, called once the run has something to load
    (None: a session for ``config`` is built then); a run with nothing new, or one that fails before loading,
    starts no JVM.

    ``on_progress`` is called with the report after planning and as tasks finish (from a driver thread);
    ``still_locked`` is asked before publishing and before the ZooKeeper commit (False: the run stops, LockLost).
    Raises an EtlError after recording a failed run.
    """
    run = _Run(config, spark, on_progress, still_locked)
    report = run.report
    history = RunHistory(config.warehouse, run.group, config["history.keep"])
    failure: EtlError | None = None
    try:
        run.run()
    except EtlError as error:
        failure = error
    except (KafkaClientError, KafkaProtocolError, KazooException, SchemaRegistryError, OSError, ValueError,
            Py4JError, PySparkException) as error:
        failure = EtlError(f"{type(error).__name__}: {error}")
    if failure is not None:
        report.finish(FAILED, time.time(), str(failure))
        log.error("run %s failed: %s", report.run_id, failure)
    else:
        loaded = bool(report.ranges or report.skipped)
        report.finish(SUCCEEDED if loaded else NOTHING_NEW, time.time())
        log.info("run %s %s: %d rows, %d bytes in %.1fs", report.run_id, report.outcome, report.rows, report.bytes,
                 report.duration_s or 0.0)
    history.record(report)
    run.progress()
    if failure is not None:
        raise failure
    return report
