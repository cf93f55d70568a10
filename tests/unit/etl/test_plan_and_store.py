"""The ETL's pure parts: planning ranges, the manifest/journal files and recovery, the Avro -> Spark mapping."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from etl.avro_types import UnsupportedSchema, raw_arrow_schema, spark_schema, without_logical_types
from etl.load import ColumnClash, table_schema
from etl.plan import EtlError, OffsetRange, OutOfRangeError, PartitionBounds, plan_ranges
from etl.store import Journal, Manifest, Move, RunInProgress, Warehouse, new_run_id
from pipeline.etl_runs import SkippedOffsets
from schemas.events import load_schema


# -- planning ------------------------------------------------------------------------------------------


def test_a_partition_never_loaded_starts_at_its_log_start_and_long_ranges_are_split() -> None:
    ranges, skipped = plan_ranges({("a", 0): PartitionBounds(5, 30), ("a", 1): PartitionBounds(0, 0)}, {}, 10)
    assert ranges == [OffsetRange("a", 0, 5, 15), OffsetRange("a", 0, 15, 25), OffsetRange("a", 0, 25, 30)]
    assert skipped == []


def test_loaded_partitions_start_where_the_published_ranges_end_and_nothing_new_plans_nothing() -> None:
    bounds = {("a", 0): PartitionBounds(0, 40), ("b", 0): PartitionBounds(0, 7)}
    ranges, _ = plan_ranges(bounds, {("a", 0): 33, ("b", 0): 7}, 100)
    assert ranges == [OffsetRange("a", 0, 33, 40)]


def test_offsets_deleted_before_loading_fail_the_plan_with_the_exact_count_per_partition() -> None:
    bounds = {("a", 0): PartitionBounds(50, 60), ("a", 1): PartitionBounds(10, 12), ("b", 0): PartitionBounds(0, 5)}
    loaded = {("a", 0): 20, ("a", 1): 9, ("b", 0): 3}
    with pytest.raises(OutOfRangeError) as failure:
        plan_ranges(bounds, loaded, 100)
    assert failure.value.lost == [SkippedOffsets("a", 0, 20, 50), SkippedOffsets("a", 1, 9, 10)]
    assert "31 offsets" in str(failure.value) and "a-0 offsets 20..49 (30 offsets)" in str(failure.value)
    ranges, skipped = plan_ranges(bounds, loaded, 100, "earliest")
    assert skipped == [SkippedOffsets("a", 0, 20, 50), SkippedOffsets("a", 1, 9, 10)]
    assert ranges == [OffsetRange("a", 0, 50, 60), OffsetRange("a", 1, 10, 12), OffsetRange("b", 0, 3, 5)]


def test_a_warehouse_ahead_of_the_partition_fails_the_plan() -> None:
    with pytest.raises(EtlError, match="created again"):
        plan_ranges({("a", 0): PartitionBounds(0, 3)}, {("a", 0): 10}, 100)


# -- the warehouse's files and recovery --------------------------------------------------------------------


def _staged_run(warehouse: Warehouse, run_id: str, count: int = 2) -> Journal:
    ranges = [OffsetRange("t", 0, 10 * i, 10 * i + 10) for i in range(count)]
    staging = warehouse.staging_dir(run_id) / "t" / "date=2023-11-14" / "hour=22"
    staging.mkdir(parents=True)
    moves = []
    for i, r in enumerate(ranges):
        (staging / f"part-{i:05d}-x.c000.parquet").write_bytes(b"data-%d" % i)
        moves.append(Move(str((staging / f"part-{i:05d}-x.c000.parquet").relative_to(warehouse.root)),
                          f"t/date=2023-11-14/hour=22/t-0-{r.start}-{r.end}-0.parquet", i, 10, 6))
    warehouse.write_plan(run_id, ranges, [])
    return Journal(Manifest(run_id, ranges, moves, [SkippedOffsets("t", 1, 0, 4)]))


def test_publish_moves_the_files_and_writes_the_manifest_and_a_rerun_of_it_changes_nothing(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    journal = _staged_run(warehouse, new_run_id())
    warehouse.write_journal(journal)
    warehouse.publish(journal)
    published = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "t").rglob("*.parquet"))
    assert published == ["t/date=2023-11-14/hour=22/t-0-0-10-0.parquet",
                         "t/date=2023-11-14/hour=22/t-0-10-20-0.parquet"]
    assert warehouse.loaded() == {("t", 0): 20, ("t", 1): 4}
    warehouse.publish(journal)
    assert [m.run_id for m in warehouse.read_manifests()] == [journal.manifest.run_id]


def test_a_journal_whose_publish_died_half_way_is_rolled_forward(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    run_id = new_run_id()
    journal = _staged_run(warehouse, run_id)
    warehouse.write_journal(journal)
    first = journal.manifest.files[0]
    (tmp_path / first.published).parent.mkdir(parents=True)
    (tmp_path / first.staged).rename(tmp_path / first.published)
    (pending,) = warehouse.journals_pending()
    assert pending.manifest == journal.manifest and pending.steps == []
    warehouse.publish(pending)
    assert [(tmp_path / m.published).read_bytes() for m in journal.manifest.files] == [b"data-0", b"data-1"]
    assert warehouse.loaded() == {("t", 0): 20, ("t", 1): 4}


def test_a_missing_staged_and_published_file_is_an_error_not_a_silent_gap(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    journal = _staged_run(warehouse, new_run_id())
    (tmp_path / journal.manifest.files[1].staged).unlink()
    with pytest.raises(FileNotFoundError, match="changed by hand"):
        warehouse.publish(journal)
    assert not warehouse.manifest_path(journal.manifest.run_id).exists()


def test_steps_after_the_manifest_are_recorded_in_the_journal_and_finish_removes_it(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    journal = _staged_run(warehouse, new_run_id())
    warehouse.write_journal(journal)
    warehouse.publish(journal)
    warehouse.step_done(journal, "zookeeper")
    assert [j.steps for j in warehouse.journals_pending()] == [["zookeeper"]]
    warehouse.finish(journal.manifest.run_id)
    assert warehouse.journals_pending() == []
    assert not warehouse.staging_dir(journal.manifest.run_id).exists()
    assert warehouse.abandoned_runs() == []


def test_staging_and_plans_without_a_journal_are_abandoned_runs_and_discarded(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    dead, publishing = new_run_id(1.0), new_run_id(2.0)
    _staged_run(warehouse, dead)
    warehouse.write_journal(_staged_run(warehouse, publishing))
    (warehouse.plans / "x.json.tmp").write_text("{")
    assert warehouse.abandoned_runs() == [dead]
    warehouse.discard(dead)
    warehouse.remove_strays()
    assert not warehouse.staging_dir(dead).exists() and warehouse.staging_dir(publishing).exists()
    assert sorted(p.name for p in warehouse.plans.iterdir()) == [f"{publishing}.json"]


def test_manifests_round_trip_and_run_ids_sort_in_time_order(tmp_path: Path) -> None:
    manifest = Manifest("r", [OffsetRange("t", 2, 5, 9)], [Move("a", "b", 0, 4, 100)], [SkippedOffsets("t", 2, 0, 5)],
                        [{"topic": "t", "count": 4}], {0: (4, 321)})
    assert Manifest.from_dict(json.loads(json.dumps(manifest.as_dict()))) == manifest
    assert new_run_id(1_700_000_000.5) < new_run_id(1_700_000_001.0) < new_run_id(1_800_000_000.0)


# -- Avro -> Spark ---------------------------------------------------------------------------------------


def test_the_page_view_schema_maps_to_a_struct_header_nullable_fields_and_utc_timestamps() -> None:
    schema = spark_schema(load_schema("PageViewEvent", 2))
    header = schema["header"].dataType
    assert isinstance(header, T.StructType)
    assert header["eventTime"].dataType == T.TimestampType()
    assert header["eventId"].dataType == T.StringType() and header["sequence"].dataType == T.LongType()
    assert schema["referrer"].dataType == T.StringType() and schema["sessionId"].nullable
    assert raw_arrow_schema(load_schema("PageViewEvent", 2)).field("header").type.field("eventTime").type == \
        pa.timestamp("ms", tz="UTC")


def test_every_avro_kind_has_its_column_type() -> None:
    avro = {"type": "record", "name": "R", "namespace": "n", "fields": [
        {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "f", "type": "float"},
        {"name": "d", "type": "double"}, {"name": "raw", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 4}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "again", "type": ["null", "E"]},
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [{"name": "x", "type": "n.E"}]}}]}
    types = {f.name: f.dataType for f in spark_schema(avro).fields}
    assert types == {"b": T.BooleanType(), "i": T.IntegerType(), "f": T.FloatType(), "d": T.DoubleType(),
                     "raw": T.BinaryType(), "e": T.StringType(), "fx": T.BinaryType(),
                     "tags": T.ArrayType(T.StringType(), True), "attrs": T.MapType(T.StringType(), T.LongType(), True),
                     "day": T.DateType(), "local": T.TimestampNTZType(), "price": T.DecimalType(9, 2),
                     "again": T.StringType(), "inner": T.StructType([T.StructField("x", T.StringType(), True)])}
    stripped = without_logical_types(avro)
    assert "logicalType" not in stripped["fields"][9]["type"] and stripped["fields"][11]["type"]["logicalType"] == \
        "decimal"
    assert avro["fields"][9]["type"]["logicalType"] == "date"


def test_a_union_of_several_types_is_refused() -> None:
    with pytest.raises(UnsupportedSchema, match="several non-null types"):
        spark_schema({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["null", "int", "string"]}]})


def test_a_table_has_the_events_fields_then_lineage_date_and_hour_and_refuses_a_clashing_field() -> None:
    schema = table_schema(load_schema("PageViewEvent", 1))
    assert schema.fieldNames()[-9:] == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp",
                                        "source_cluster", "source_partition", "source_offset", "date", "hour"]
    assert schema["kafka_timestamp"].dataType == T.TimestampType() and schema["hour"].dataType == T.IntegerType()
    with pytest.raises(ColumnClash, match="kafka_offset"):
        table_schema({"type": "record", "name": "R", "fields": [{"name": "kafka_offset", "type": "long"}]})


def test_one_run_at_a_time_holds_a_group_of_a_warehouse(tmp_path: Path) -> None:
    first, second, other = Warehouse(tmp_path, "g"), Warehouse(tmp_path, "g"), Warehouse(tmp_path, "h")
    with first.exclusive():
        with pytest.raises(RunInProgress, match=rf"group g .*\(process {os.getpid()}\)"):
            with second.exclusive():
                pass
        with other.exclusive():
            pass
    with second.exclusive():
        pass
