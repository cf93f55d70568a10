"""One run of the ETL: recover, plan, load, publish, commit, audit, keep the warehouse, and record what it did.

    recover   journals of dead runs are rolled forward (moves, manifest, then the steps after it);
              staging and plans of runs that died before publishing are discarded (etl.commit)
    plan      ranges from the loaded ends to the latest offsets (etl.plan), for the topics with a reader
              schema, written before any data is read; a topic without one is reported and waits
    load      one Spark job per topic, one task per range, into the run's staging directory (etl.load,
              etl.task), records that cannot be rows into the staged quarantine; a topic whose job fails is
              reported and loaded again by the next run, the others go on
    publish   a journal of the moves and the manifest, fsynced; the moves; the manifest (the commit point)
    commit    the offsets to /consumers/GROUP/offsets/TOPIC/PARTITION in ZooKeeper, for consumers who look there
    audit     tier-warehouse AuditCount records: rows, and quarantined records, per topic, datacenter and window
    upkeep    retention and compaction, each a commit of its own (etl.maintenance)
    finish    the journal, staging and plan removed, the manifests folded into the checkpoint

Every run, failed or with nothing new, is recorded in the run history before ``run_once`` returns or raises.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable

from kazoo.exceptions import KazooException
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from etl.audit_counts import WAREHOUSE_TIER, AuditCounts
from etl.avro_types import UnsupportedSchema
from etl.commit import Committer, LockLost, OfflineCluster
from etl.config import EtlConfig
from etl.files import fsync_file
from etl.load import ColumnClash, load_topic, staged_moves, staged_quarantine_moves
from etl.maintenance import keep_warehouse
from etl.plan import EtlError, OffsetRange, plan_ranges
from etl.store import Manifest, Move, RunInProgress, Warehouse, new_run_id
from etl.task import TASK_ERROR, StatsParam, TaskContext
from pipeline.client.errors import KafkaClientError
from pipeline.etl_runs import (
    FAILED,
    NOTHING_NEW,
    PARTIAL,
    SUCCEEDED,
    RangeReport,
    RunHistory,
    RunReport,
    SkippedOffsets,
)
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.testing_faults import Faults
from schemas.events import subject_for
from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError
from schemas.registry_client_settings import RegistryClientSettings

__all__ = ["EtlError", "LockLost", "WAREHOUSE_TIER", "run_once"]

log = logging.getLogger(__name__)

_PROGRESS_INTERVAL_S = 0.5


class _TopicFailed(Exception):
    """One topic could not be loaded (the others go on)."""


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
        self.readers: dict[str, str] = {}

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
        offline = OfflineCluster(self.config)
        try:
            committer = Committer(self.config, self.warehouse, offline, self.still_locked)
            committer.recover()
            self.load_new_offsets(offline, committer)
            keep_warehouse(self.config, self.warehouse, committer, self.session, self.report)
            committer.fold()
        finally:
            offline.close()

    def load_new_offsets(self, offline: OfflineCluster, committer: Committer) -> None:
        report = self.report
        bounds = offline.bounds(self.config["topics"], self.config["exclude.topics"], self.config["isolation.level"])
        ranges, skipped = plan_ranges(bounds, self.warehouse.loaded(), self.config["max.range.records"],
                                      self.config["out.of.range"])
        readers = self.readers = self.reader_schemas(sorted({r.topic for r in ranges} | {s.topic for s in skipped}))
        self.ranges = [r for r in ranges if r.topic in readers]
        report.ranges = [RangeReport(r.topic, r.partition, r.start, r.end) for r in self.ranges]
        report.skipped = [s for s in skipped if s.topic in readers]
        if not self.ranges and not report.skipped:
            return
        self.warehouse.write_plan(report.run_id, self.ranges, report.skipped)
        log.info("run %s: %d ranges of %d offsets planned%s", report.run_id, len(self.ranges),
                 sum(r.count for r in self.ranges),
                 f", {sum(s.count for s in report.skipped)} offsets skipped" if report.skipped else "")
        self.progress()
        stats = self.load(offline) if self.ranges else {}
        manifest = self.manifest(stats)
        if manifest.ranges or manifest.skipped:
            committer.commit(manifest)
        else:
            self.warehouse.discard(report.run_id)

    def discard_unpublished(self) -> None:
        """After a failure: the run's staging and plan, unless its publish began (recovery completes that)."""
        run_id = self.report.run_id
        if not self.warehouse.journal_path(run_id).exists():
            self.warehouse.discard(run_id)

    # -- loading ---------------------------------------------------------------------------------------

    def session(self) -> SparkSession:
        """The run's SparkSession, started only now that there is something to load (a JVM takes seconds)."""
        if self._spark is None:
            from etl.spark import build_session
            self._spark = build_session(self.config)
        elif not isinstance(self._spark, SparkSession):
            self._spark = self._spark()
        return self._spark

    def reader_schemas(self, topics: list[str]) -> dict[str, str]:
        """The reader schema (JSON text) of each of ``topics``: its subject's latest version. A topic without one
        is reported in the run's ``topic_errors`` and left out."""
        readers = {}
        if not topics:
            return readers
        with SchemaRegistryClient.from_config(self.config) as registry:
            for topic in topics:
                try:
                    readers[topic] = registry.latest(subject_for(topic))[2].text
                except SchemaRegistryError as error:
                    self.topic_failed(topic, f"no reader schema (subject {subject_for(topic)}): {error}")
        return readers

    def topic_failed(self, topic: str, error: str) -> None:
        log.error("run %s: topic %s not loaded: %s", self.report.run_id, topic, error)
        self.report.topic_errors[topic] = error

    def load(self, offline: OfflineCluster) -> dict[int, dict[str, Any]]:
        spark = self.session()
        accumulator = spark.sparkContext.accumulator({}, StatsParam())
        brokers = offline.brokers()
        watcher_stop = threading.Event()
        watcher = threading.Thread(target=self.watch, args=(accumulator, watcher_stop), name="etl-progress",
                                   daemon=True)
        watcher.start()
        try:
            self.load_topics(spark, brokers, accumulator)
        finally:
            watcher_stop.set()
            watcher.join()
        stats = dict(accumulator.value)
        self.apply(stats)
        return stats

    def load_topics(self, spark: SparkSession, brokers: str, accumulator: Any) -> None:
        """One Spark job per topic, up to concurrent.topics at once (their tasks share the executors); a topic
        whose job fails is reported in ``topic_errors``, the others go on."""
        run_id = self.report.run_id
        quarantine = self.config["on.bad.record"] == "quarantine"
        readers = self.readers

        def load(topic: str, first: int, ranges: list[OffsetRange]) -> None:
            context = TaskContext(topic, brokers, self.config["schema.registry.url"], readers[topic],
                                  self.config["fetch.size"], self.config["out.of.range"] == "earliest", run_id,
                                  str(self.warehouse.staged_quarantine(run_id, topic)) if quarantine else None,
                                  Faults.of(self.config), RegistryClientSettings.from_config(self.config),
                                  self.config.security, self.config["isolation.level"])
            spark.sparkContext.setJobGroup(f"{run_id}-{topic}", f"etl run {run_id}: {topic}")
            try:
                load_topic(spark, context, ranges, first, self.warehouse.staged_table(run_id, topic),
                           self.config["audit.window.ms"], accumulator)
            except (ColumnClash, UnsupportedSchema) as error:
                raise _TopicFailed(str(error)) from None
            except (Py4JError, PySparkException) as error:
                raise _TopicFailed(_spark_error(topic, error)) from None

        with ThreadPoolExecutor(self.config["concurrent.topics"], thread_name_prefix="etl-topic") as pool:
            futures = {pool.submit(load, topic, first, ranges): topic for topic, first, ranges in self.by_topic()}
            for done in as_completed(futures):
                error = done.exception()
                if error is not None:
                    self.topic_failed(futures[done], str(error) if isinstance(error, _TopicFailed)
                                      else f"{type(error).__name__}: {error}")

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

    # -- the manifest ------------------------------------------------------------------------------------

    def manifest(self, stats: dict[int, dict[str, Any]]) -> Manifest:
        """The manifest of what the run loaded: the ranges of every topic loaded in full (renumbered), their
        staged files and quarantined records, skipped offsets, audit counts. A topic whose tasks' reports do not
        match the files they staged is not published (topic_errors)."""
        run_id, report = self.report.run_id, self.report
        ranges: list[OffsetRange] = []
        files: list[Move] = []
        range_stats: dict[int, tuple[int, int]] = {}
        audit = AuditCounts(self.config["audit.window.ms"])
        skipped = [s for s in report.skipped if s.topic not in report.topic_errors]
        for topic, first, topic_ranges in self.by_topic():
            if topic in report.topic_errors:
                continue
            try:
                moves = self.topic_moves(topic, first, topic_ranges, stats)
            except _TopicFailed as error:
                self.topic_failed(topic, str(error))
                continue
            renumber = {first + i: len(ranges) + i for i in range(len(topic_ranges))}
            files += [Move(m.staged, m.published, renumber[m.range_index], m.rows, m.bytes) for m in moves]
            for old, new in renumber.items():
                s = stats[old]
                range_stats[new] = (s["rows"], s["bytes"])
                audit.add_task_stats(topic, s)
                skipped += [SkippedOffsets(topic, self.ranges[old].partition, a, b) for a, b in s["skipped"]]
            ranges += topic_ranges
        for path in {self.warehouse.root / m.staged for m in files}:
            fsync_file(path)
        report.ranges = [RangeReport(r.topic, r.partition, r.start, r.end, *range_stats[i])
                         for i, r in enumerate(ranges)]
        report.skipped = skipped
        report.quarantined = audit.quarantined_by_topic()
        return Manifest(run_id, ranges, files, skipped, audit.records(run_id), range_stats)

    def topic_moves(self, topic: str, first: int, ranges: list[OffsetRange],
                    stats: dict[int, dict[str, Any]]) -> list[Move]:
        """The staged files of one topic, checked against what its tasks reported (run-wide range indexes)."""
        missing = [str(r) for i, r in enumerate(ranges) if first + i not in stats]
        if missing:
            raise _TopicFailed(f"no task reported loading {', '.join(missing)}")
        run_id = self.report.run_id
        rows = staged_moves(self.warehouse.root, self.warehouse.staged_table(run_id, topic), topic, ranges, first)
        quarantined = staged_quarantine_moves(self.warehouse.root, self.warehouse.staged_quarantine(run_id, topic),
                                              topic, ranges, first)
        for kind, moves, expected in (("rows", rows, lambda s: s["rows"]),
                                      ("quarantined records", quarantined,
                                       lambda s: sum(q[3] + q[6] for q in s.get("quarantined", ())))):
            written: dict[int, int] = {}
            for move in moves:
                written[move.range_index] = written.get(move.range_index, 0) + move.rows
            for i, r in enumerate(ranges):
                reported = expected(stats[first + i])
                if written.get(first + i, 0) != reported:
                    raise _TopicFailed(f"{r}: the task reported {reported} {kind} but "
                                       f"{written.get(first + i, 0)} were staged")
        return rows + quarantined


def _spark_error(topic: str, error: BaseException) -> str:
    text = str(error)
    found = re.search(re.escape(TASK_ERROR) + r"(.*)", text)
    if found:
        return found.group(1).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return f"loading {topic} failed in Spark: {first}"


def _outcome(report: RunReport) -> str:
    if report.topic_errors:
        return PARTIAL
    return SUCCEEDED if report.ranges or report.skipped else NOTHING_NEW


def run_once(config: EtlConfig, spark: SparkSession | Callable[[], SparkSession] | None = None, *,
             on_progress: Callable[[RunReport], None] | None = None,
             still_locked: Callable[[], bool] | None = None) -> RunReport:
    """Plan, load, publish and commit one run, then keep the warehouse (retention, compaction); record it in
    the run history and return its report.

    ``spark`` is the session to load with, or a function giving it, called once the run has something to load
    or compact (None: a session for ``config`` is built then); a run with nothing to do, or one that fails
    before loading, starts no JVM.

    ``on_progress`` is called with the report after planning and as tasks finish (from a driver thread);
    ``still_locked`` is asked before each publish and before the ZooKeeper commit (False: the run stops, LockLost).
    A topic that cannot be loaded makes the run ``partial`` (returned, the topics in ``topic_errors``); any other
    failure raises an EtlError after recording a failed run.
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
        outcome = _outcome(report)
        error = "; ".join(f"topic {topic}: {text}" for topic, text in sorted(report.topic_errors.items())) or None
        report.finish(outcome, time.time(), error)
        log.info("run %s %s: %d rows, %d bytes%s in %.1fs", report.run_id, report.outcome, report.rows, report.bytes,
                 f", {report.quarantined_records} records quarantined" if report.quarantined else "",
                 report.duration_s or 0.0)
    history.record(report)
    run.progress()
    if failure is not None:
        raise failure
    return report
