"""The ETL reads committed (real offline cluster, registry and Spark local[2]): a run loads the committed
transactions' events, never an aborted one's, and stops at an open transaction (the last stable offset) until it
ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from etl.job import run_once
from pipeline.client.producer import Producer, ProducerData
from schemas.events import load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support.etl import EtlEnvironment, environment_fixture, page_views, spark_fixture, warehouse_rows

pytestmark = pytest.mark.slow

env = environment_fixture("etl-read-committed")
spark = spark_fixture()


def test_a_run_loads_committed_transactions_only_and_stops_at_an_open_one(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    schema = load_schema("PageViewEvent", 1)
    env.create_topic("views", 1)
    events = page_views(40)
    with SchemaRegistryClient(env.registry.url) as registry:
        encoder = AvroEncoder(registry, {"views": schema})
        producer = Producer({"zookeeper.connect": env.offline.zk_connect, "transactional.id": "etl-test",
                             "serializer.class": encoder})
        try:
            producer.init_transactions(30)

            def transaction(first: int, last: int, commit: bool | None) -> None:
                producer.begin_transaction()
                producer.send([ProducerData("views", b"%d" % i, [events[i]], partition=0) for i in range(first, last)])
                if commit is True:
                    producer.commit_transaction(30)
                elif commit is False:
                    producer.abort_transaction(30)

            transaction(0, 10, True)
            transaction(10, 15, False)
            transaction(15, 25, True)
            transaction(25, 30, None)  # open while the ETL runs
            config = env.config(tmp_path / "warehouse", topics="views")
            report = run_once(config, spark)
            assert report.outcome == "succeeded" and report.rows == 20
            loaded = {row["header"]["eventId"] for row in warehouse_rows(tmp_path / "warehouse", "views").values()}
            assert loaded == {events[i]["header"]["eventId"] for i in (*range(10), *range(15, 25))}
            producer.commit_transaction(30)
            transaction(30, 40, False)
        finally:
            producer.close()
    again = run_once(config, spark)
    assert again.outcome == "succeeded" and again.rows == 5
    loaded = {row["header"]["eventId"] for row in warehouse_rows(tmp_path / "warehouse", "views").values()}
    assert loaded == {events[i]["header"]["eventId"] for i in (*range(10), *range(15, 30))}
    assert run_once(config, spark).outcome == "nothing-new"
