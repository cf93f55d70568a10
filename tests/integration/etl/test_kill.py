"""SIGKILL of the ETL's driver (``python -m etl load``, Spark local[2]) at each point of a run, then a rerun: the
warehouse ends with every offset exactly once, as an uninterrupted run leaves it, and ZooKeeper has the ends.

The driver is made to stop dead at a point by the fault-injection setting ``testing.pause.at`` (pipeline/testing_faults.py). One sequence
covers the points in turn, new events before each run, so that each rerun also recovers what the previous
kill left: killed while tasks run (staging, no journal: discarded), after the journal and one move (rolled
forward), after the manifest before the ZooKeeper commit (commit completed), during the ZooKeeper commit.
The last rerun goes through spark-submit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from etl.quarantine import quarantine_table
from etl.store import Warehouse
from pipeline.etl_runs import RunHistory
from schemas.events import load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder
from tests.support.clients import run_kcat
from tests.support.etl import (
    EVENT_TIME,
    SPARK_SUBMIT,
    EtlEnvironment,
    EtlProcess,
    environment_fixture,
    expected_keys,
    lineage_headers,
    page_views,
    run_etl,
    warehouse_rows,
)
from tests.support.mirror import committed, end_offsets, produce, read_all
from tests.support.polling import wait_until

# Five Spark drivers one after another, each starting its JVM: 142-297 s measured beside the rest of the suite.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "killed"
PARTITIONS = 2


env = environment_fixture("etl-kill")


def _killed_at(env: EtlEnvironment, tmp_path: Path, warehouse: Path, point: str) -> None:
    marker = tmp_path / f"paused-{point}"
    process = EtlProcess(tmp_path / f"etl-{point}.log", env.args(
        warehouse, "--topics", TOPIC, "--set", "max.range.records=9", "--set", f"testing.pause.at={point}",
        "--set", f"testing.pause.file={marker}")).start()
    try:
        wait_until(lambda: marker.exists() or process.process.poll() is not None, 120, interval=0.1,
                   message=f"the run to reach {point}")
        assert marker.exists(), f"the run ended before {point}:\n{process.log_tail()}"
        process.kill_driver()
    finally:
        process.cleanup()


def _committed(env: EtlEnvironment) -> dict[int, int | None]:
    return {partition: committed(env.offline, "etl", TOPIC, partition) for partition in range(PARTITIONS)}


def test_a_driver_killed_at_any_point_and_rerun_loads_every_offset_exactly_once(
        env: EtlEnvironment, tmp_path: Path) -> None:
    schema = load_schema("PageViewEvent", 1)
    env.create_topic(TOPIC, PARTITIONS)
    warehouse = tmp_path / "warehouse"
    store = Warehouse(warehouse, "etl")
    produced = 0

    def produce(count: int) -> None:
        nonlocal produced
        env.produce(TOPIC, page_views(count, produced),
                    schema, [lineage_headers("dc1", i % 3, i) for i in range(produced, produced + count)])
        produced += count

    produce(40)
    # A stray line among them: its quarantine file goes through every kill and recovery with the rows.
    stray_offset = end_offsets(env.offline, TOPIC, PARTITIONS)[0]
    run_kcat(["-b", env.offline.bootstrap, "-P", "-t", TOPIC, "-p", "0"], b"a stray line\n")
    _killed_at(env, tmp_path, warehouse, "loading")
    assert list(store.read_manifests()) == [] and store.journals_pending() == [] and store.abandoned_runs()

    produce(30)
    _killed_at(env, tmp_path, warehouse, "publishing")
    (journal,) = store.journals_pending()
    assert list(store.read_manifests()) == [] and store.abandoned_runs() == []
    assert sum((warehouse / m.published).exists() for m in journal.manifest.files) == 1

    produce(25)
    _killed_at(env, tmp_path, warehouse, "published")
    # The recovered run's manifest is folded into the checkpoint; the killed run's waits for its journal's steps.
    (manifest,) = store.read_manifests()
    assert [j.manifest.run_id for j in store.journals_pending()] == [manifest.run_id]
    assert sum(store.checkpoint().loaded.values()) == 71 and sum(store.loaded().values()) == 96  # stray included
    # The first run's commit was completed by the recovery; the second's has not begun.
    assert _committed(env) != end_offsets(env.offline, TOPIC, PARTITIONS)

    produce(20)
    _killed_at(env, tmp_path, warehouse, "committing")
    assert len(store.journals_pending()) == 1

    # The rerun goes through spark-submit (etl/submit.py, the project shipped as a zip).
    code, output = run_etl(tmp_path / "etl-final.log", env.args(warehouse, "--topics", TOPIC), command=SPARK_SUBMIT)
    assert code == 0 and "kafka-etl-project.zip" in output and "starting Spark (master of spark-submit)" in output, \
        output
    ends = end_offsets(env.offline, TOPIC, PARTITIONS)
    assert sum(ends.values()) == produced + 1 == 116
    rows = warehouse_rows(warehouse, TOPIC)
    assert set(rows) == expected_keys(TOPIC, ends) - {(TOPIC, 0, stray_offset)}
    (stray,) = quarantine_table([warehouse / f for f in store.snapshot().quarantine_files()[TOPIC]]).to_pylist()
    assert (stray["kafka_offset"], stray["value"], stray["reason"]) == (stray_offset, b"a stray line",
                                                                        "not in the Confluent wire format")
    # Each row is its message, as an uninterrupted run writes it.
    with SchemaRegistryClient(env.registry.url) as registry:
        decoder = AvroDecoder(registry)
        for partition, records in read_all(env.offline, TOPIC, PARTITIONS).items():
            for record in records:
                if (partition, record.offset) == (0, stray_offset):
                    continue
                event = decoder.decode(record.value)
                row = rows[(TOPIC, partition, record.offset)]
                assert row["header"]["eventId"] == str(event["header"]["eventId"])
                sequence = event["header"]["sequence"]
                assert (row["source_cluster"], row["source_partition"], row["source_offset"]) == \
                    ("dc1", sequence % 3, sequence)
    assert _committed(env) == ends
    assert store.journals_pending() == [] and store.abandoned_runs() == []
    assert not any((store.staging).iterdir())


def test_the_command_line_exits_1_on_a_failed_run_recorded_in_the_history_and_2_on_bad_settings(
        env: EtlEnvironment, tmp_path: Path) -> None:
    env.create_topic("unregistered", 1)
    produce(env.offline, "unregistered", [(b"k", b"not avro", EVENT_TIME, [])])
    warehouse = tmp_path / "warehouse"
    code, output = run_etl(tmp_path / "etl-failed.log", env.args(warehouse, "--topics", "unregistered"))
    errors = [line for line in output.splitlines() if line.startswith("python -m etl: error:")]
    assert code == 1 and len(errors) == 1 and "Traceback" not in output, output
    assert "topic unregistered not loaded: no reader schema (subject unregistered-value)" in errors[0]
    assert "starting Spark" not in output, "a run that loads nothing starts no JVM"
    # The topic is skipped and named; its offsets are not planned as loaded: the next run tries it again.
    (partial,) = RunHistory(warehouse, "etl").runs()
    assert partial.outcome == "partial" and partial.ranges == [] and list(partial.topic_errors) == ["unregistered"]
    assert "no reader schema" in partial.topic_errors["unregistered"] and "no reader schema" in partial.error
    assert Warehouse(warehouse, "etl").loaded() == {}

    code, output = run_etl(tmp_path / "etl-bad.log", env.args(warehouse, "--set", "max.range.records=0"))
    assert code == 2 and output.startswith("python -m etl: error: etl setting max.range.records=0"), output
