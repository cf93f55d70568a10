"""An accelerated soak of the warehouse's upkeep: thousands of ETL runs of small data, a simulated minute apart, go
through the real planning (etl.plan over the checkpoint and unfolded manifests) and the real commit protocol
(etl.commit: journal, publish, manifest, fold), writing one small Parquet file per range as a task does; every few
simulated hours retention and compaction run with real Spark (local[2]). Planning time, manifests on disk, the
checkpoint and the files per closed hour partition stay bounded, and `etl query` reads the same bounded number of
files and counts every row exactly once.

The warehouse lives on tmpfs when there is one (/dev/shm): what is measured is what the ETL reads and keeps, not
the disk's fsync latency. The offline cluster's ZooKeeper commit is the one step left out (``_ZooKeeperOffsets``
records the ends instead), so that no Kafka or ZooKeeper is needed.
"""

from __future__ import annotations

import calendar
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from etl.commit import Committer
from etl.config import EtlConfig
from etl.load import staged_moves, table_schema
from etl.maintenance import keep_warehouse
from etl.plan import OffsetRange, PartitionBounds, loaded_ends, plan_ranges
from etl.query import show_query
from etl.spark import build_session, stop_session
from etl.store import Manifest, Warehouse, new_run_id
from pipeline.etl_runs import RunReport
from pipeline.warehouse_state import live_files as live_files_of
from schemas.events import load_schema

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = {"soak_views": 1, "soak_clicks": 1}
ROWS_PER_RANGE = 5
RUNS = 1800
EVERY_S = 60.0
UPKEEP_EVERY = 600  # runs (10 simulated hours) between retention and compaction: three Spark compactions in all
RETENTION_H = 6
#: 2023-11-14 22:00 UTC, the simulated start.
START = float(calendar.timegm((2023, 11, 14, 22, 0, 0)))


class _ZooKeeperOffsets:
    """Where the offline cluster's ZooKeeper commit would write, kept in memory (see the module's text)."""

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], int] = {}

    def commit_offsets(self, group: str, manifest: Manifest, faults: object = None) -> None:
        self.committed.update(loaded_ends([*manifest.ranges, *manifest.skipped]))


@pytest.fixture
def warehouse_dir() -> Iterator[Path]:
    shm = Path("/dev/shm")
    directory = Path(tempfile.mkdtemp(prefix="etl-soak-", dir=shm if shm.is_dir() else None))
    try:
        yield directory / "warehouse"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = build_session(EtlConfig({"zookeeper.connect": "unused:2181", "warehouse.dir": "unused",
                                       "spark.master": "local[2]"}))
    try:
        yield session
    finally:
        stop_session(session)


class _Runs:
    """The simulated runs: each plans from the warehouse, stages one file per range (as Spark names them) and
    commits; ``rows`` is what the tables should hold per (topic, hour start)."""

    def __init__(self, warehouse: Warehouse, config: EtlConfig) -> None:
        self.warehouse = warehouse
        self.config = config
        self.offsets = _ZooKeeperOffsets()
        self.committer = Committer(config, warehouse, self.offsets)  # type: ignore[arg-type]
        self.target = to_arrow_schema(table_schema(load_schema("PageViewEvent", 1)), timezone="UTC")
        self.data_schema = pa.schema([f for f in self.target if f.name not in ("date", "hour")])
        self.latest = {(topic, p): 0 for topic, n in PARTITIONS.items() for p in range(n)}
        self.rows: dict[tuple[str, float], int] = {}
        self.planning_s: list[float] = []

    def run(self, now: float) -> None:
        for key in self.latest:
            self.latest[key] += ROWS_PER_RANGE
        bounds = {key: PartitionBounds(0, end) for key, end in self.latest.items()}
        began = time.perf_counter()
        ranges, _ = plan_ranges(bounds, self.warehouse.loaded(), 250_000)
        self.planning_s.append(time.perf_counter() - began)
        run_id = new_run_id(now)
        moves = []
        range_stats = {}
        hour = now - now % 3600
        moment = time.gmtime(now)
        directory = f"date={time.strftime('%Y-%m-%d', moment)}/hour={moment.tm_hour}"
        for topic in PARTITIONS:
            first = next(i for i, r in enumerate(ranges) if r.topic == topic)
            topic_ranges = [r for r in ranges if r.topic == topic]
            staging = self.warehouse.staged_table(run_id, topic)
            for index, r in enumerate(topic_ranges):
                self.stage(staging / directory / f"part-{index:05d}-soak.c000.snappy.parquet", r, now)
                range_stats[first + index] = (r.count, r.count * 100)
            moves += staged_moves(self.warehouse.root, staging, topic, topic_ranges, first)
            self.rows[(topic, hour)] = self.rows.get((topic, hour), 0) + sum(r.count for r in topic_ranges)
        self.committer.commit(Manifest(run_id, ranges, moves, range_stats=range_stats))

    def stage(self, path: Path, r: OffsetRange, now: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        us = int(now * 1_000_000)
        rows = [{"header": {"eventId": f"{r.partition:08x}-0000-4000-8000-{offset:012x}", "eventTime": us,
                            "server": "fe1", "datacenter": "dc1", "service": "frontend", "sequence": offset},
                 "memberId": offset, "pageKey": "home", "url": f"/{offset}", "referrer": None, "userAgent": "ua",
                 "kafka_topic": r.topic, "kafka_partition": r.partition, "kafka_offset": offset,
                 "kafka_timestamp": us, "source_cluster": "dc1", "source_partition": r.partition,
                 "source_offset": offset} for offset in range(r.start, r.end)]
        pq.write_table(pa.Table.from_pylist(rows, schema=self.data_schema), path)

    def upkeep(self, spark: SparkSession, now: float) -> RunReport:
        report = RunReport(new_run_id(now), "etl", now)
        keep_warehouse(self.config, self.warehouse, self.committer, lambda: spark, report, now=now)
        assert report.maintenance_error is None, report.maintenance_error
        self.committer.fold()
        for key in [key for key in self.rows if key[1] + 3600 <= now - RETENTION_H * 3600]:
            del self.rows[key]
        return report


def _query_count(spark: SparkSession, warehouse: Path, topic: str,
                 capsys: pytest.CaptureFixture[str]) -> tuple[int, float]:
    began = time.perf_counter()
    show_query(spark, warehouse, f"SELECT count(*) AS n, count(DISTINCT kafka_partition, kafka_offset) AS d "
                                 f"FROM {topic}", 5)
    elapsed = time.perf_counter() - began
    cells = [line.strip("|").split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    count, distinct = int(cells[1][0]), int(cells[1][1])
    assert count == distinct, "a row is in the table twice"
    return count, elapsed


def test_thousands_of_runs_keep_planning_manifests_and_files_per_partition_bounded(
        spark: SparkSession, warehouse_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = EtlConfig({"zookeeper.connect": "unused:2181", "warehouse.dir": str(warehouse_dir), "group.id": "etl",
                        "audit.enable": "false", "warehouse.retention": f"{RETENTION_H}h",
                        "compaction.delay": "30m", "compaction.target.bytes": str(1 << 20),
                        "compaction.max.partitions": "100", "obsolete.files.keep": "0"})
    warehouse = Warehouse(warehouse_dir, "etl")
    runs = _Runs(warehouse, config)
    began = time.perf_counter()
    live_files, checkpoint_bytes, queries = [], [], []
    for number in range(1, RUNS + 1):
        now = START + number * EVERY_S
        runs.run(now)
        assert len(list(warehouse.manifests.glob("*.json"))) == 0, "every complete commit is folded"
        if number % UPKEEP_EVERY == 0:
            report = runs.upkeep(spark, now)
            assert report.maintenance.get("partitions_compacted", 0) > 0
            snapshot = warehouse.snapshot()
            closed = {p: files for p, files in snapshot.partitions().items() if p.ends_at() <= now - 1800}
            assert closed and max(len(files) for files in closed.values()) == 1, "closed hours compacted to one file"
            for partition, files in closed.items():
                on_disk = sorted((warehouse_dir / partition.directory).glob("*.parquet"))
                assert [p.relative_to(warehouse_dir).as_posix() for p in on_disk] == files
            live_files.append(len(snapshot.files))
            checkpoint_bytes.append(warehouse.checkpoint_path.stat().st_size)
            if number in (2 * UPKEEP_EVERY, RUNS):
                counted, elapsed = _query_count(spark, warehouse_dir, "soak_views", capsys)
                assert counted == sum(n for (topic, _), n in runs.rows.items() if topic == "soak_views")
                queries.append((elapsed, sum(len(files) for files in live_files_of(warehouse_dir).values())))
    total_s = time.perf_counter() - began
    assert runs.offsets.committed == runs.latest and warehouse.loaded() == runs.latest
    # Planning in the 200 runs after the first upkeep (retention reached: the steady state) and after the second,
    # at the same point of the upkeep's cycle: the history doubled, planning did not grow.
    after_first = runs.planning_s[UPKEEP_EVERY:UPKEEP_EVERY + 200]
    after_second = runs.planning_s[2 * UPKEEP_EVERY:2 * UPKEEP_EVERY + 200]
    print(f"\n{RUNS} runs in {total_s:.1f}s; planning median (ms): first 200 runs "
          f"{statistics.median(runs.planning_s[:200]) * 1000:.2f}, after the 1st upkeep "
          f"{statistics.median(after_first) * 1000:.2f}, after the 2nd {statistics.median(after_second) * 1000:.2f}, "
          f"last 200 {statistics.median(runs.planning_s[-200:]) * 1000:.2f}; live files after each upkeep "
          f"{live_files}; checkpoint bytes {checkpoint_bytes}; etl query (seconds, files read) "
          f"{[(round(s, 2), n) for s, n in queries]}")
    # Bounded: retention keeps 6 hours, compaction one file per closed hour, at most 600 runs' files open.
    assert statistics.median(after_second) < 1.5 * statistics.median(after_first) + 0.001
    assert live_files[-1] <= live_files[1] + 10 and checkpoint_bytes[-1] <= 1.2 * checkpoint_bytes[1]
    assert queries[1][1] <= queries[0][1] + 10, "etl query reads a bounded number of files"
