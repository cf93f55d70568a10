"""What the drills on stored data make and check without a deployment: the poison records of ``chaos
poison-record`` (each kind, and the event under a schema id the registry lacks, which still names its own event
id) and whether ``chaos fill-disk`` may mount its small filesystem here."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from fastavro import schemaless_reader, schemaless_writer

from infra.deployment.poison import (NULL_VALUE_KEY, STRAY_LINE, UNKNOWN_SCHEMA_ID, PoisonError, check_unknown,
                                     poison_records)
from infra.deployment.small_disk import cannot_mount
from producers.workload import Workload
from schemas.events import load_schema, parsed_schema
from schemas.registry_client import RegisteredSchema, SchemaRegistryError
from schemas.serde import event_key, schema_id_of

SCHEMA_ID = 7


class FakeRegistry:
    """A registry holding PageViewEvent under id 7 and nothing else."""

    def schema(self, schema_id: int) -> RegisteredSchema:
        if schema_id != SCHEMA_ID:
            raise SchemaRegistryError(404, 40403, "Schema not found")
        return RegisteredSchema(SCHEMA_ID, json.dumps(load_schema("PageViewEvent")))


def page_view() -> tuple[dict, bytes]:
    event = next(e for e in Workload("dc1", 2, seed=3).next_events(1_700_000_000_000, 200)
                 if e.topic == "PageViewEvent").value
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, SCHEMA_ID))
    schemaless_writer(out, parsed_schema("PageViewEvent"), event)
    return event, out.getvalue()


def test_one_poison_record_of_each_kind_with_the_reason_the_quarantine_gives() -> None:
    event, sample = page_view()
    stray, null, unknown = poison_records(sample, FakeRegistry(), 1_800_000_000_000)  # type: ignore[arg-type]
    assert (stray.key, stray.value, stray.event_id, stray.reason) == (None, STRAY_LINE, None,
                                                                      "not in the Confluent wire format")
    assert (null.key, null.value, null.event_id, null.reason) == (NULL_VALUE_KEY, None, None, "null value")
    assert unknown.reason == "unknown schema id" and unknown.key is None
    # the event under an id the registry lacks: its own event id, now as its time, the rest as the sample
    assert unknown.value is not None and schema_id_of(unknown.value) == UNKNOWN_SCHEMA_ID
    key = event_key(unknown.value)
    assert key is not None and (key.event_id, key.event_time) == (unknown.event_id, 1_800_000_000_000)
    assert unknown.event_id != event["header"]["eventId"]
    stream = io.BytesIO(unknown.value)
    stream.seek(5)
    decoded = schemaless_reader(stream, parsed_schema("PageViewEvent"), None)
    assert stream.tell() == len(unknown.value)
    assert {**decoded, "header": None} == {**event, "header": None}
    assert {k: v for k, v in decoded["header"].items() if k not in ("eventId", "eventTime")} == \
        {k: v for k, v in event["header"].items() if k not in ("eventId", "eventTime")}
    # every drill makes an event id of its own
    assert poison_records(sample, FakeRegistry(), 0)[2].event_id != unknown.event_id  # type: ignore[arg-type]


def test_the_unknown_schema_id_must_be_unknown_to_the_registry() -> None:
    check_unknown(FakeRegistry())  # type: ignore[arg-type]
    with pytest.raises(PoisonError, match="has a schema with id 7"):
        check_unknown(FakeRegistry(), SCHEMA_ID)  # type: ignore[arg-type]

    class Unreachable:
        def schema(self, schema_id: int) -> RegisteredSchema:
            raise SchemaRegistryError(0, 0, "cannot reach http://127.0.0.1:1")

    with pytest.raises(PoisonError, match="cannot ask the registry about schema id"):
        check_unknown(Unreachable())  # type: ignore[arg-type]


def test_fill_disk_says_why_it_cannot_mount_without_cap_sys_admin(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCapEff:\t00000000a80425fb\n")  # a container's default set: no CAP_SYS_ADMIN
    assert "needs CAP_SYS_ADMIN (root)" in (cannot_mount(status) or "")
    status.write_text("Name:\tpython\nCapEff:\t000001ffffffffff\n")
    assert cannot_mount(status) is None
    status.write_text("Name:\tpython\n")
    assert "cannot be read" in (cannot_mount(status) or "")
