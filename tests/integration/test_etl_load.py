"""The ETL against a real offline cluster, registry and Spark local[2]: rows equal messages with exact lineage,
reruns add exactly the new offsets, schema evolution, out-of-range offsets, undecodable records."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

from etl.history import RunHistory
from etl.job import EtlError, run_once
from etl.spark import build_session
from schemas.events import load_schema
from tests.support.etl import EtlEnvironment, expected_keys, lineage_headers, page_views, warehouse_rows
from tests.support.mirror import end_offsets, read_all


@pytest.fixture(scope="module")
def env(zookeeper_server: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtlEnvironment]:
    environment = EtlEnvironment(zookeeper_server, tmp_path_factory.mktemp("etl"))
    try:
        yield environment
    finally:
        environment.close()


@pytest.fixture(scope="module")
def spark(env: EtlEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = build_session(env.config(tmp_path_factory.mktemp("unused")))
    try:
        yield session
    finally:
        session.stop()


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
    config = env.config(warehouse, topics="views|clicks", **{"max.range.records": "7"})

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

    again = run_once(config, spark)
    assert again.outcome == "nothing-new" and again.rows == 0
    assert len(warehouse_rows(warehouse, "views")) == 60

    env.produce("views", page_views(15, 60), schema)
    third = run_once(config, spark)
    assert third.rows == 15
    ends = end_offsets(env.offline, "views", 3)
    assert set(warehouse_rows(warehouse, "views")) == expected_keys("views", ends)
    assert [r.outcome for r in RunHistory(warehouse, "etl").runs()] == ["succeeded", "nothing-new", "succeeded"]
    offsets = {p: int(env.offline.zk.get(f"/consumers/etl/offsets/views/{p}")[0]) for p in range(3)}
    assert offsets == ends
