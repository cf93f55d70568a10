"""The ETL against a registry that wants a login over HTTPS: the driver and the Spark tasks (which get the
settings in their TaskContext) read the writer schemas with basic.auth.user.info and the CA, the run's audit
counts register theirs; the rows land as with an open registry."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from etl.job import run_once
from schemas.events import load_schema
from tests.support.etl import EtlEnvironment, environment_fixture, page_views, spark_fixture, warehouse_rows

env = environment_fixture("etl-secured-registry", secured=True)
spark = spark_fixture()


def test_a_run_reads_a_secured_registry_from_its_tasks(env: EtlEnvironment, spark: SparkSession,
                                                      tmp_path: Path) -> None:
    env.create_topic("views", 2)
    env.produce("views", page_views(30), load_schema("PageViewEvent", 1))
    warehouse = tmp_path / "warehouse"
    report = run_once(env.config(warehouse, topics="views", **{"audit.enable": "true"}), spark)
    assert report.outcome == "succeeded" and report.rows == 30, report
    assert len(warehouse_rows(warehouse, "views")) == 30
    assert "failed login" not in env.registry.log_path.read_text()
