"""Records the ETL cannot load, against a real offline cluster, registry and Spark local[2]: poison records of each
kind (kcat's stray line and null value, crafted wire-format values from our producer) are quarantined with their
lineage, reason and bytes beside every good row, counted by quarantine AuditCount records, listed and shown by
`python -m etl quarantine`, and replayed exactly once after the missing schema is registered; topics fail apart."""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import uuid
from pathlib import Path
from typing import Any, Iterator

import fastavro
import pytest
from pyspark.sql import SparkSession

from etl.__main__ import main as etl_main
from etl.job import run_once
from etl.quarantine import quarantine_table
from etl.query import show_query
from etl.replay import replay_quarantine
from etl.store import Warehouse
from pipeline.auditing.sketch import EventSketch
from schemas.events import AUDIT_NAME, AUDIT_TOPIC, load_schema, subject_for
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder
from tests.support.clients import run_kcat
from tests.support.etl import (
    EtlEnvironment,
    environment_fixture,
    expected_keys,
    page_views,
    run_etl,
    spark_fixture,
    warehouse_rows,
)
from tests.support.mirror import end_offsets, produce, read_all

pytestmark = pytest.mark.slow


env = environment_fixture("etl-quarantine")
spark = spark_fixture()


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask most shells have (022): what the ETL writes must be owner-only all the same."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def wire(schema_id: int, schema: dict[str, Any], event: dict[str, Any]) -> bytes:
    """``event`` in the Confluent wire format under ``schema_id``, encoded with ``schema``."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), event)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def audit_counts(env: EtlEnvironment, run_id: str) -> list[dict[str, Any]]:
    with SchemaRegistryClient(env.registry.url) as registry:
        decoder = AvroDecoder(registry)
        found = [decoder.decode(r.value) for r in read_all(env.offline, AUDIT_TOPIC, 1)[0]]
    return [a for a in found if a["properties"].get("run") == run_id]


def test_poison_records_are_quarantined_beside_every_good_row_and_replayed_once_their_schema_exists(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        loose_umask: None) -> None:
    topic, v1, v2 = "poisoned", load_schema("PageViewEvent", 1), load_schema("PageViewEvent", 2)
    env.create_topic(topic, 1)
    env.produce(topic, page_views(6), v1)  # offsets 0-5
    with SchemaRegistryClient(env.registry.url) as registry:
        v1_id = registry.lookup(subject_for(topic), v1)
        registry.register(subject_for(AUDIT_TOPIC), load_schema(AUDIT_NAME))  # the run's audit needs it
        scratch = {"type": "record", "name": f"Scratch{uuid.uuid4().hex}", "fields": [{"name": "a", "type": "int"}]}
        next_id = registry.register("scratch-value", scratch) + 1
    # A stray line (mirrored from dc2: it has lineage) and a null value, as a user types them with kcat.
    run_kcat(["-b", env.offline.bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t",
              "-H", "mirror.cluster=dc2", "-H", "mirror.partition=3", "-H", "mirror.offset=77"],
             b"stray-key\ta stray line\n")  # offset 6
    run_kcat(["-b", env.offline.bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-Z"], b"null-key\t\n")  # 7
    # An event written with a schema id the registry has not allocated yet (a v2 writer ahead of its
    # registration), and one whose body is cut short: both keep their event id (the header is readable).
    ahead, cut = page_views(2, 100, version=2)
    cut.pop("sessionId")
    event_time = ahead["header"]["eventTime"]
    produce(env.offline, topic, [(b"ahead", wire(next_id, v2, ahead), event_time, []),  # offset 8
                                 (b"cut", wire(v1_id, v1, cut)[:-6], event_time, [])])  # offset 9
    env.produce(topic, page_views(4, 6), v1)  # offsets 10-13
    warehouse = tmp_path / "warehouse"
    config = env.config(warehouse, topics=topic, **{"audit.enable": "true"})

    report = run_once(config, spark)
    assert report.outcome == "succeeded" and report.rows == 10 and report.topic_errors == {}
    assert report.quarantined == {topic: {"not in the Confluent wire format": 1, "null value": 1,
                                          "unknown schema id": 1, "undecodable value": 1}}
    assert set(warehouse_rows(warehouse, topic)) == expected_keys(topic, {0: 6}) | expected_keys(topic, {0: 14},
                                                                                                 {0: 10})
    # Each poison record is in the quarantine with its lineage, bytes, reason and the run.
    store = Warehouse(warehouse, "etl")
    assert store.loaded() == {(topic, 0): 14}
    quarantined = {r["kafka_offset"]: r for r in quarantine_table(
        [warehouse / p for p in store.snapshot().quarantine_files()[topic]]).to_pylist()}
    assert sorted(quarantined) == [6, 7, 8, 9]
    assert {o: r["reason"] for o, r in quarantined.items()} == {
        6: "not in the Confluent wire format", 7: "null value", 8: "unknown schema id", 9: "undecodable value"}
    assert all(r["run_id"] == report.run_id and r["kafka_topic"] == topic and r["kafka_partition"] == 0
               for r in quarantined.values())
    stray = quarantined[6]
    assert (stray["key"], stray["value"]) == (b"stray-key", b"a stray line")
    assert (stray["source_cluster"], stray["source_partition"], stray["source_offset"]) == ("dc2", 3, 77)
    assert [(h["key"], h["value"]) for h in stray["headers"]] == [("mirror.cluster", b"dc2"),
                                                                  ("mirror.partition", b"3"), ("mirror.offset", b"77")]
    assert stray["event_id"] is None and stray["datacenter"] == "dc2"
    assert quarantined[7]["key"] == b"null-key" and quarantined[7]["value"] is None
    assert quarantined[8]["event_id"] == ahead["header"]["eventId"] and quarantined[8]["schema_id"] == next_id
    assert f"unknown schema id {next_id}" in quarantined[8]["error"]
    assert quarantined[9]["event_id"] == cut["header"]["eventId"] and "EOFError" in quarantined[9]["error"]
    assert int(quarantined[8]["kafka_timestamp"].timestamp() * 1000) == event_time

    # The warehouse tier's audit: rows, and one quarantine record per reason and window.
    counts = audit_counts(env, report.run_id)
    assert all(a["tier"] == "warehouse" and a["properties"]["recordId"] for a in counts)
    assert sum(a["count"] for a in counts if "quarantined" not in a["properties"]) == 10
    by_reason = {a["properties"]["quarantined"]: a for a in counts if "quarantined" in a["properties"]}
    assert {reason: (a["count"], a["properties"]["withoutId"]) for reason, a in by_reason.items()} == {
        "not in the Confluent wire format": (0, "1"), "null value": (0, "1"), "unknown schema id": (1, "0"),
        "undecodable value": (1, "0")}
    assert by_reason["not in the Confluent wire format"]["datacenter"] == "dc2"
    assert EventSketch.from_bytes(by_reason["unknown schema id"]["sketch"]).decode().counts == \
        {ahead["header"]["eventId"]: 1}
    assert by_reason["unknown schema id"]["windowStart"].timestamp() * 1000 == event_time - event_time % 60_000

    # python -m etl quarantine list / show, and the `quarantine` view of etl query.
    assert etl_main(["quarantine", "list", "--warehouse", str(warehouse), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["kafka_offset"], r["reason"], r["run_id"]) for r in listed] == \
        [(o, quarantined[o]["reason"], report.run_id) for o in (6, 7, 8, 9)]
    assert etl_main(["quarantine", "list", "--warehouse", str(warehouse), "--reason", "null value"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 2 and f"{topic}-0@7" in table[1] and "null value" in table[1]
    assert etl_main(["quarantine", "show", "--warehouse", str(warehouse), "--registry", env.registry.url,
                     topic, "0", "9"]) == 0
    shown = capsys.readouterr().out
    assert "undecodable value" in shown and cut["header"]["eventId"] in shown
    assert f"does not decode with its writer schema {v1_id}" in shown
    assert etl_main(["quarantine", "show", "--warehouse", str(warehouse), topic, "0", "6"]) == 0
    assert "text 'a stray line'" in capsys.readouterr().out
    assert etl_main(["quarantine", "show", "--warehouse", str(warehouse), topic, "0", "3"]) == 1
    show_query(spark, warehouse, "SELECT reason, count(*) AS n FROM quarantine GROUP BY reason ORDER BY reason", 10)
    assert "|unknown schema id               |1  |" in capsys.readouterr().out

    # The missing schema is registered (it gets the id the record was written with): replay loads that record
    # alone, exactly once, and publishes its audit count; the others stay.
    with SchemaRegistryClient(env.registry.url) as registry:
        assert registry.register(subject_for(topic), v2) == next_id
    replayed = replay_quarantine(config)
    assert replayed.loaded == {topic: 1} and replayed.still_quarantined == {topic: 3}
    rows = warehouse_rows(warehouse, topic)
    assert set(rows) == expected_keys(topic, {0: 14}) - {(topic, 0, o) for o in (6, 7, 9)}
    assert rows[(topic, 0, 8)]["sessionId"] == ahead["sessionId"]
    assert rows[(topic, 0, 8)]["header"]["eventId"] == ahead["header"]["eventId"]
    left = quarantine_table([warehouse / p for p in store.snapshot().quarantine_files()[topic]]).to_pylist()
    assert sorted(r["kafka_offset"] for r in left) == [6, 7, 9]
    loaded, netted = audit_counts(env, replayed.run_id)
    assert loaded["count"] == 1 and loaded["properties"]["replayed"] == "true"
    assert EventSketch.from_bytes(loaded["sketch"]).decode().counts == {ahead["header"]["eventId"]: 1}
    # ... and the quarantine record that named it is netted out: the audit names it quarantined no longer.
    assert netted["properties"]["quarantined"] == "unknown schema id" and netted["count"] == -1
    assert netted["properties"]["withoutId"] == "0"
    assert EventSketch.from_bytes(netted["sketch"]).decode().counts == {ahead["header"]["eventId"]: -1}
    # Again, through the command line: nothing more to load.
    code, output = run_etl(tmp_path / "replay.log", ["quarantine", "replay", *env.args(warehouse)[1:]])
    assert code == 0 and f"{topic}: 0 records loaded, 3 still quarantined" in output, output
    assert len(warehouse_rows(warehouse, topic)) == 11
    assert run_once(config, spark).outcome == "nothing-new"
    assert len(warehouse_rows(warehouse, topic)) == 11
    # Owner-only, though this test's umask is 022: Spark's files, the quarantine's, the replay's, the
    # checkpoint, the history.
    loose = {p.relative_to(tmp_path).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in warehouse.rglob("*")
             if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)}
    assert loose == {} and stat.S_IMODE(warehouse.stat().st_mode) == 0o700


def test_topics_fail_apart_and_what_failed_loads_at_a_later_run(
        env: EtlEnvironment, spark: SparkSession, tmp_path: Path) -> None:
    v1 = load_schema("PageViewEvent", 1)
    for topic in ("apart-fine", "apart-strict", "apart-unregistered"):
        env.create_topic(topic, 1)
    env.produce("apart-fine", page_views(5), v1)
    env.produce("apart-strict", page_views(3), v1)
    produce(env.offline, "apart-strict", [(b"k", b"not avro", 1_700_000_000_000, [])])
    with SchemaRegistryClient(env.registry.url) as registry:
        v1_id = registry.lookup(subject_for("apart-fine"), v1)
    produce(env.offline, "apart-unregistered", [(b"k", wire(v1_id, v1, e), e["header"]["eventTime"], [])
                                                for e in page_views(4)])
    warehouse = tmp_path / "warehouse"
    strict = env.config(warehouse, topics="apart-.*", **{"on.bad.record": "fail"})

    report = run_once(strict, spark)
    assert report.outcome == "partial" and sorted(report.topic_errors) == ["apart-strict", "apart-unregistered"]
    assert "apart-strict-0 offset 3: cannot decode the value" in report.topic_errors["apart-strict"]
    assert "no reader schema (subject apart-unregistered-value)" in report.topic_errors["apart-unregistered"]
    assert [(r.topic, r.rows) for r in report.ranges] == [("apart-fine", 5)]
    assert len(warehouse_rows(warehouse, "apart-fine")) == 5 and Warehouse(warehouse, "etl").loaded() == \
        {("apart-fine", 0): 5}

    with SchemaRegistryClient(env.registry.url) as registry:
        registry.register(subject_for("apart-unregistered"), v1)
    report = run_once(env.config(warehouse, topics="apart-.*"), spark)
    assert report.outcome == "succeeded" and report.topic_errors == {}
    assert report.quarantined == {"apart-strict": {"not in the Confluent wire format": 1}}
    assert sorted((r.topic, r.rows) for r in report.ranges) == [("apart-strict", 3), ("apart-unregistered", 4)]
    assert end_offsets(env.offline, "apart-strict", 1) == {0: 4}
    assert set(warehouse_rows(warehouse, "apart-strict")) == expected_keys("apart-strict", {0: 3})
    assert len(warehouse_rows(warehouse, "apart-unregistered")) == 4
    assert Warehouse(warehouse, "etl").loaded() == {("apart-fine", 0): 5, ("apart-strict", 0): 4,
                                                    ("apart-unregistered", 0): 4}
