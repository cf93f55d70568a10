"""The ETL against a real offline cluster, registry and Spark local[2]: rows equal messages with exact lineage,
reruns add exactly the new offsets, schema evolution, out-of-range offsets, undecodable records."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from etl.job import EtlError, LockLost, run_once
from etl.load import range_frame
from etl.plan import OffsetRange
from etl.query import QueryError, show_query
from etl.store import Warehouse
from pipeline.auditing.latency import LatencyBuckets
from pipeline.auditing.sketch import EventSketch
from pipeline.client.simple_consumer import SimpleConsumer
from pipeline.etl_runs import RunHistory, SkippedOffsets
from schemas.events import AUDIT_TOPIC, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder
from tests.support.etl import (
    EVENT_TIME,
    EtlEnvironment,
    environment_fixture,
    expected_keys,
    lineage_headers,
    page_views,
    run_etl,
    spark_fixture,
    warehouse_rows,
)
from tests.support.mirror import committed, end_offsets, produce, read_all
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow


env = environment_fixture("etl", {"log.retention.check.interval.ms": 200})
spark = spark_fixture()


def test_rows_equal_messages_with_exact_lineage_and_reruns_add_exactly_the_new_offsets(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    schema = load_schema("PageViewEvent", 1)
    env.create_topic("views", 3)
    env.create_topic("clicks", 2)
    views = page_views(60)
    mirrored = [lineage_headers("dc2", i % 4, 1000 + i) if i % 2 else [] for i in range(60)]
    env.produce("views", views, schema, mirrored)
    env.produce("clicks", page_views(20, 500), schema)
    warehouse = tmp_path / "warehouse"
    config = env.config(warehouse, topics="views|clicks", **{"max.range.records": "7", "audit.enable": "true"})

    report = run_once(config, spark)
    assert report.outcome == "succeeded" and report.rows == 80
    assert report.first_task_s is not None and report.first_task_s >= 0
    messages = read_all(env.offline, "views", 3)
    rows = warehouse_rows(warehouse, "views")
    assert set(rows) == expected_keys("views", {p: len(m) for p, m in messages.items()})
    by_id = {e["header"]["eventId"]: (i, e) for i, e in enumerate(views)}
    for partition, records in messages.items():
        for record in records:
            row = rows[("views", partition, record.offset)]
            index, event = by_id[row["header"]["eventId"]]
            assert row["memberId"] == event["memberId"] and row["referrer"] == event["referrer"]
            assert row["kafka_timestamp"].timestamp() * 1000 == record.timestamp
            if index % 2:
                assert (row["source_cluster"], row["source_partition"], row["source_offset"]) == ("dc2", index % 4,
                                                                                                  1000 + index)
            else:
                assert (row["source_cluster"], row["source_partition"], row["source_offset"]) == (None, None, None)
    assert set(warehouse_rows(warehouse, "clicks")) == expected_keys("clicks", end_offsets(env.offline, "clicks", 2))
    # Tier-warehouse audit: the rows per topic and window of event time (one event a minute: one per window).
    with SchemaRegistryClient(env.registry.url) as registry:
        decoder = AvroDecoder(registry)
        audit = [decoder.decode(r.value) for r in read_all(env.offline, AUDIT_TOPIC, 1)[0]]
    assert {a["tier"] for a in audit} == {"warehouse"} and {a["datacenter"] for a in audit} == {"dc1"}
    assert sum(a["count"] for a in audit if a["topic"] == "views") == 60
    assert sorted(int(a["windowStart"].timestamp() * 1000) for a in audit if a["topic"] == "clicks") == \
        [e["header"]["eventTime"] // 60_000 * 60_000 for e in page_views(20, 500)]
    # Each count carries the sketch of its rows' event ids (the audit names events from it).
    loaded = EventSketch()
    for a in audit:
        if a["topic"] == "views":
            loaded += EventSketch.from_bytes(a["sketch"])
    assert loaded.decode().counts == {e["header"]["eventId"]: 1 for e in views}
    # ... and how long after its event time each row was loaded (these events are years old: the last bucket).
    ages = [LatencyBuckets.from_text(a["properties"]["latency"]) for a in audit if a["topic"] == "views"]
    assert sum(a.count for a in ages) == 60 == sum(a.counts[-1] for a in ages)

    again = run_once(config, spark)
    assert again.outcome == "nothing-new" and again.rows == 0
    assert len(warehouse_rows(warehouse, "views")) == 60

    env.produce("views", page_views(15, 60), schema)
    third = run_once(config, spark)
    assert third.rows == 15
    ends = end_offsets(env.offline, "views", 3)
    assert set(warehouse_rows(warehouse, "views")) == expected_keys("views", ends)
    assert [r.outcome for r in RunHistory(warehouse, "etl").runs()] == ["succeeded", "nothing-new", "succeeded"]
    assert {p: committed(env.offline, "etl", "views", p) for p in range(3)} == ends


def test_v1_and_v2_events_of_a_topic_load_into_one_table_with_the_merged_schema(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    env.create_topic("evolving", 1)
    env.produce("evolving", page_views(5), load_schema("PageViewEvent", 1))
    warehouse = tmp_path / "warehouse"
    config = env.config(warehouse, topics="evolving")
    assert run_once(config, spark).rows == 5
    # The schema moves to v2: events of both versions follow; the second run reads them all as v2.
    env.produce("evolving", page_views(5, 5, version=2), load_schema("PageViewEvent", 2))
    env.produce("evolving", page_views(5, 10), load_schema("PageViewEvent", 1))
    assert run_once(config, spark).rows == 10
    table = spark.read.option("mergeSchema", "true").parquet(str(warehouse / "evolving"))
    assert "sessionId" in table.columns
    sessions = {r["kafka_offset"]: r["sessionId"] for r in table.select("kafka_offset", "sessionId").collect()}
    assert sessions == {o: (f"session-{o}" if 5 <= o < 10 else None) for o in range(15)}
    # The README's query: page views per hour per datacenter.
    table.createOrReplaceTempView("page_views")
    hours = spark.sql("""SELECT date, hour, header.datacenter AS datacenter, count(*) AS views
                         FROM page_views GROUP BY date, hour, header.datacenter ORDER BY date, hour, datacenter""")
    expected: dict[tuple[str, int], int] = {}
    for event in page_views(15):
        when = datetime.fromtimestamp(event["header"]["eventTime"] / 1000, timezone.utc)
        expected[(when.date().isoformat(), when.hour)] = expected.get((when.date().isoformat(), when.hour), 0) + 1
    assert [(str(r["date"]), r["hour"], r["datacenter"], r["views"]) for r in hours.collect()] == \
        [(day, hour, "dc1", views) for (day, hour), views in sorted(expected.items())]


def _earliest(env: EtlEnvironment, topic: str) -> int:
    broker = next(iter(env.offline.brokers.values()))
    with SimpleConsumer(broker.host, broker.port) as consumer:
        return consumer.get_offsets_before(topic, 0, -2, 1)[0]


def test_offsets_deleted_before_loading_fail_the_run_with_the_count_or_are_skipped_and_recorded(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    env.create_topic("retained", 1, {"segment.bytes": "2048", "retention.bytes": "8192"})
    schema = load_schema("PageViewEvent", 1)
    env.produce("retained", page_views(20), schema)
    warehouse = tmp_path / "warehouse"
    config = env.config(warehouse, topics="retained")
    assert run_once(config, spark).rows == 20
    env.produce("retained", page_views(400, 20), schema)
    seen: list[int] = []

    def settled() -> int:
        # Retention runs every 200 ms: the log start is settled once it stays put over several looks.
        seen.append(_earliest(env, "retained"))
        return seen[-1] if seen[-1] > 20 and seen[-4:] == [seen[-1]] * 4 else 0

    log_start = wait_until(settled, 30, interval=0.25, message="retention to delete offsets after 20")
    lost = log_start - 20
    with pytest.raises(EtlError) as failure:
        run_once(config, spark)
    assert f"{lost} offsets were deleted by retention" in str(failure.value)
    assert f"retained-0 offsets 20..{log_start - 1} ({lost} offsets)" in str(failure.value)
    (failed,) = RunHistory(warehouse, "etl").runs(1)
    assert failed.outcome == "failed" and f"({lost} offsets)" in failed.error
    assert not (warehouse / "_etl" / "etl" / "staging").exists() or not any((warehouse / "_etl/etl/staging").iterdir())

    skipping = env.config(warehouse, topics="retained", **{"out.of.range": "earliest"})
    report = run_once(skipping, spark)
    assert report.outcome == "succeeded" and report.skipped == [SkippedOffsets("retained", 0, 20, log_start)]
    end = end_offsets(env.offline, "retained", 1)[0]
    assert set(warehouse_rows(warehouse, "retained")) == (expected_keys("retained", {0: 20})
                                                          | expected_keys("retained", {0: end}, {0: log_start}))
    # The skipped offsets count as done: the next run starts at the end (the manifest is folded already).
    assert Warehouse(warehouse, "etl").loaded() == {("retained", 0): end}
    assert list(Warehouse(warehouse, "etl").read_manifests()) == []
    assert RunHistory(warehouse, "etl").runs(1)[0].skipped == [SkippedOffsets("retained", 0, 20, log_start)]


def test_with_on_bad_record_fail_a_record_that_does_not_decode_fails_its_topic_naming_partition_and_offset(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    env.create_topic("broken", 1)
    env.produce("broken", page_views(3), load_schema("PageViewEvent", 1))
    produce(env.offline, "broken", [(b"k", b"\x00\x00\x00\x00\x01garbage", EVENT_TIME, [])])
    warehouse = tmp_path / "warehouse"
    report = run_once(env.config(warehouse, topics="broken", **{"on.bad.record": "fail"}), spark)
    assert report.outcome == "partial" and report.ranges == [] and report.quarantined == {}
    assert report.topic_errors.keys() == {"broken"}
    assert "broken-0 offset 3: cannot decode the value" in report.topic_errors["broken"]
    assert warehouse_rows(warehouse, "broken") == {} and Warehouse(warehouse, "etl").loaded() == {}
    (recorded,) = RunHistory(warehouse, "etl").runs()
    assert recorded.outcome == "partial" and "topic broken: broken-0 offset 3: cannot decode" in recorded.error


def test_a_lost_lock_stops_the_run_before_publishing_or_before_the_commit_and_the_next_run_completes_it(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    env.create_topic("locked", 2)
    env.produce("locked", page_views(30), load_schema("PageViewEvent", 1))
    warehouse = tmp_path / "warehouse"
    config = env.config(warehouse, topics="locked")
    store = Warehouse(warehouse, "etl")
    with pytest.raises(LockLost, match="before publishing"):
        run_once(config, spark, still_locked=lambda: False)
    assert warehouse_rows(warehouse, "locked") == {} and list(store.read_manifests()) == []
    assert store.abandoned_runs() == []

    answers = iter([True, False])
    with pytest.raises(LockLost, match="before committing"):
        run_once(config, spark, still_locked=lambda: next(answers))
    assert len(warehouse_rows(warehouse, "locked")) == 30 and len(store.journals_pending()) == 1
    assert committed(env.offline, "etl", "locked", 0) is None

    seen: list[tuple[str | None, int]] = []
    report = run_once(config, spark, on_progress=lambda r: seen.append((r.outcome, r.rows)))
    assert report.outcome == "nothing-new" and store.journals_pending() == []
    ends = end_offsets(env.offline, "locked", 2)
    assert {p: committed(env.offline, "etl", "locked", p) for p in range(2)} == ends
    assert seen[-1] == ("nothing-new", 0)
    assert [r.outcome for r in RunHistory(warehouse, "etl").runs()] == ["nothing-new", "failed", "failed"]

    env.produce("locked", page_views(10, 30), load_schema("PageViewEvent", 1))
    seen.clear()
    run_once(config, spark, on_progress=lambda r: seen.append((r.outcome, r.rows)))
    assert seen[0] == (None, 0) and seen[-1] == ("succeeded", 10)


def test_a_range_spanning_more_hours_than_concurrent_writers_lands_in_its_hour_directories(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    env.create_topic("hourly", 1)
    events = page_views(40, every_ms=3_600_000)
    env.produce("hourly", events, load_schema("PageViewEvent", 1))
    warehouse = tmp_path / "warehouse"
    assert run_once(env.config(warehouse, topics="hourly"), spark).rows == 40
    table = warehouse / "hourly"
    files = sorted(p.relative_to(table).parent.as_posix() for p in table.rglob("*.parquet"))
    expected = []
    for event in events:
        when = datetime.fromtimestamp(event["header"]["eventTime"] / 1000, timezone.utc)
        expected.append(f"date={when.date().isoformat()}/hour={when.hour}")
    assert files == sorted(expected)
    rows = warehouse_rows(warehouse, "hourly")
    assert {row["header"]["eventTime"].timestamp() * 1000 for row in rows.values()} == \
        {e["header"]["eventTime"] for e in events}


def test_etl_query_runs_spark_sql_over_every_table_and_the_events_view_of_their_common_columns(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env.create_topic("queried", 2)
    env.create_topic("queried_v2", 1)
    env.produce("queried", page_views(30), load_schema("PageViewEvent", 1))
    env.produce("queried_v2", page_views(12, 100, version=2), load_schema("PageViewEvent", 2))
    warehouse = tmp_path / "warehouse"
    assert run_once(env.config(warehouse, topics="queried|queried_v2"), spark).rows == 42
    assert (warehouse / "_etl").is_dir()

    sql = ("SELECT kafka_topic, count(*) AS n, count(DISTINCT header.eventId) AS ids, min(date) AS day FROM events "
           "GROUP BY kafka_topic ORDER BY kafka_topic")
    code, output = run_etl(tmp_path / "query.log",
                           ["query", "--warehouse", str(warehouse), "--master", "local[1]", sql])
    assert code == 0, output
    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in output.splitlines()
             if line.startswith("|")]
    day = datetime.fromtimestamp(EVENT_TIME / 1000, timezone.utc).date().isoformat()
    assert table == [["kafka_topic", "n", "ids", "day"], ["queried", "30", "30", day], ["queried_v2", "12", "12", day]]

    # Each topic is a view with all its columns; `events` has only those every table has.
    show_query(spark, warehouse, "SELECT count(sessionId) AS sessions FROM queried_v2", 10)
    assert "|12      |" in capsys.readouterr().out
    with pytest.raises(QueryError, match=r"^\[UNRESOLVED_COLUMN.*`sessionId`"):
        show_query(spark, warehouse, "SELECT sessionId FROM events", 10)
    with pytest.raises(QueryError, match=r"^\[PARSE_SYNTAX_ERROR\] Syntax error at or near 'SELEC'"):
        show_query(spark, warehouse, "SELEC 1", 10)
    show_query(spark, warehouse, "SELECT kafka_offset FROM queried ORDER BY kafka_offset", 2)
    assert "only showing top 2 rows" in capsys.readouterr().out

    # Without a table (the ETL's own directories are not tables): one line, exit 1, no Spark started.
    (tmp_path / "empty" / "_etl").mkdir(parents=True)
    (tmp_path / "empty" / "_etl" / "stray.parquet").write_bytes(b"")
    for directory, error in ((tmp_path / "empty", "has no table yet"), (tmp_path / "none", "there is no warehouse")):
        code, output = run_etl(tmp_path / f"{directory.name}.log",
                               ["query", "--warehouse", str(directory), "SELECT 1"])
        assert code == 1 and len(output.strip().splitlines()) == 1 and error in output, output


def test_closed_hours_are_compacted_by_the_runs_exactly_once_with_lineage_and_evolved_columns(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env.create_topic("compacted", 2)
    warehouse = tmp_path / "warehouse"
    # Events of 2023: their hours closed long ago. Three runs add a file per range and hour each; the third
    # run's upkeep rewrites every hour's small files into one (one task per hour, the target far above).
    config = env.config(warehouse, topics="compacted", **{"compaction.enable": "true",
                                                             "compaction.target.bytes": str(1 << 20),
                                                             "obsolete.files.keep": "0"})
    no_compaction = env.config(warehouse, topics="compacted")
    every_ms = 20 * 60_000  # three events an hour
    env.produce("compacted", page_views(12, every_ms=every_ms), load_schema("PageViewEvent", 1),
                [lineage_headers("dc2", i % 4, 1000 + i) for i in range(12)])
    assert run_once(no_compaction, spark).rows == 12
    env.produce("compacted", page_views(12, every_ms=every_ms, version=2), load_schema("PageViewEvent", 2))
    assert run_once(no_compaction, spark).rows == 12
    store = Warehouse(warehouse, "etl")
    before = {p: len(files) for p, files in store.snapshot().partitions().items()}
    assert len(before) == 4 and set(before.values()) == {4}, "two runs, two ranges: four files an hour"
    rows_before = warehouse_rows(warehouse, "compacted")

    env.produce("compacted", page_views(3, 100, every_ms=1), load_schema("PageViewEvent", 1))  # the first hour
    report = run_once(config, spark)
    assert report.rows == 3 and report.maintenance_error is None
    added = len([r for r in report.ranges if r.rows])
    assert report.maintenance == {"partitions_compacted": 4, "files_compacted": 16 + added, "files_written": 4}
    after = store.snapshot().partitions()
    assert {p: len(files) for p, files in after.items()} == {p: 1 for p in before}
    for partition, (path,) in after.items():
        assert "-compacted-" in path
        assert sorted(p.name for p in (warehouse / partition.directory).iterdir()) == [Path(path).name], \
            "the replaced files are gone (obsolete.files.keep=0)"
    rows = warehouse_rows(warehouse, "compacted")
    ends = end_offsets(env.offline, "compacted", 2)
    assert set(rows) == expected_keys("compacted", ends)
    for key, row in rows_before.items():
        assert rows[key] == row, "each row as it was, lineage and evolved columns included"
    assert sum(1 for row in rows.values() if row.get("sessionId")) == 12
    assert sum(1 for row in rows.values() if row["source_cluster"] == "dc2") == 12
    # A run with nothing new and nothing to compact does nothing more; the query reads the compacted files.
    again = run_once(config, spark)
    assert again.outcome == "nothing-new" and again.maintenance == {}
    show_query(spark, warehouse, "SELECT count(*) AS n, count(DISTINCT kafka_partition, kafka_offset) AS d "
                                 "FROM compacted", 5)
    assert "|27 |27 |" in capsys.readouterr().out


def test_the_range_frame_holds_range_i_alone_in_partition_i_with_its_index_in_the_run(spark: SparkSession) -> None:
    ranges = [OffsetRange("t", p, 10 * p + 2 ** 40, 10 * p + 5 + 2 ** 40) for p in range(5)]
    frame = range_frame(spark, ranges, 7)
    assert frame.rdd.getNumPartitions() == 5
    assert frame.rdd.glom().map(lambda rows: [tuple(r) for r in rows]).collect() == \
        [[(7 + i, r.partition, r.start, r.end)] for i, r in enumerate(ranges)]
