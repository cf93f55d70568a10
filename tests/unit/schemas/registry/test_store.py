"""The registry's rules over the local-directory backend: ids, versions, deletes, compatibility, config."""

from __future__ import annotations

import json
from pathlib import Path

import avro.schema
import pytest

from schemas import events

from schemas.registry.backends import DirectoryBackend
from schemas.registry.errors import RegistryError
from schemas.registry.store import SchemaRegistryStore


def record(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "User", "fields": list(fields)})


V1 = record({"name": "id", "type": "long"})
V2 = record({"name": "id", "type": "long"}, {"name": "email", "type": ["null", "string"], "default": None})
NO_DEFAULT = record({"name": "id", "type": "long"}, {"name": "age", "type": "int"})


@pytest.fixture
def store(tmp_path: Path) -> SchemaRegistryStore:
    return SchemaRegistryStore(DirectoryBackend(tmp_path / "registry"))


def code_of(call, *args, **kwargs) -> int:
    with pytest.raises(RegistryError) as raised:
        call(*args, **kwargs)
    return raised.value.code


def test_same_schema_keeps_one_id_across_texts_and_subjects(store: SchemaRegistryStore) -> None:
    first = store.register("a-value", V1)
    spaced = json.dumps(json.loads(V1), indent=4)
    assert store.register("a-value", spaced) == first
    assert store.register("b-value", V1) == first
    assert store.versions("a-value") == [1]
    assert store.register("a-value", V2) == first + 1
    assert store.versions("a-value") == [1, 2]
    assert sorted(store.subject_versions_of_id(first)) == [("a-value", 1), ("b-value", 1)]


def test_ids_are_never_reused_after_a_hard_delete(store: SchemaRegistryStore, tmp_path: Path) -> None:
    first = store.register("a-value", V1)
    store.delete_subject("a-value")
    store.delete_subject("a-value", permanent=True)
    assert code_of(store.versions, "a-value", deleted=True) == 40401
    other = store.register("a-value", V2)
    assert other > first
    restarted = SchemaRegistryStore(DirectoryBackend(tmp_path / "registry"))
    assert restarted.schema_text(other) == store.schema_text(other)
    assert restarted.register("c-value", record({"name": "x", "type": "int"})) > other


def test_incompatible_schema_is_refused_and_nothing_is_stored(store: SchemaRegistryStore) -> None:
    store.register("a-value", V1)
    assert code_of(store.register, "a-value", NO_DEFAULT) == 409
    assert store.versions("a-value") == [1]
    assert code_of(store.lookup, "a-value", NO_DEFAULT) == 40403
    store.set_config("a-value", "none")
    assert store.register("a-value", NO_DEFAULT) > 0


def test_soft_then_permanent_deletes(store: SchemaRegistryStore) -> None:
    store.register("a-value", V1)
    store.register("a-value", V2)
    assert code_of(store.delete_version, "a-value", 1, permanent=True) == 40407
    assert store.delete_version("a-value", 1) == 1
    assert code_of(store.delete_version, "a-value", 1) == 40406
    assert store.versions("a-value") == [2]
    assert store.versions("a-value", deleted=True) == [1, 2]
    assert code_of(store.version, "a-value", 1) == 40402
    assert store.version("a-value", 1, deleted=True)["version"] == 1
    assert code_of(store.delete_subject, "a-value", permanent=True) == 40405
    assert store.delete_subject("a-value") == [2]
    assert code_of(store.delete_subject, "a-value") == 40404
    assert store.subjects() == [] and store.subjects(deleted=True) == ["a-value"]
    assert store.delete_subject("a-value", permanent=True) == [1, 2]


def test_errors_for_unknown_and_invalid_input(store: SchemaRegistryStore) -> None:
    assert code_of(store.versions, "nope") == 40401
    assert code_of(store.schema_text, 99) == 40403
    assert code_of(store.register, "a-value", "{not json") == 42201
    assert code_of(store.register, "a-value", V1, "PROTOBUF") == 42201
    store.register("a-value", V1)
    assert code_of(store.version, "a-value", 7) == 40402
    assert code_of(store.version, "a-value", "zero") == 42202
    assert code_of(store.set_config, None, "SIDEWAYS") == 42203
    assert code_of(store.set_mode, "WRITEONLY") == 42204
    store.set_mode("readonly")
    assert code_of(store.register, "a-value", V2) == 42205


def test_config_levels_fall_back_to_global_then_backward(store: SchemaRegistryStore) -> None:
    assert store.compatibility("a-value").value == "BACKWARD"
    store.set_config(None, "full")
    assert store.compatibility("a-value").value == "FULL"
    store.set_config("a-value", "NONE")
    assert store.config("a-value").value == "NONE"
    assert store.delete_config("a-value").value == "NONE"
    assert store.config("a-value") is None
    assert store.compatibility("a-value").value == "FULL"


def test_schema_references_resolve_identify_and_protect_their_targets(store: SchemaRegistryStore) -> None:
    header = events.references("PageViewEvent")[0]
    header_id = store.register(header, json.dumps(events.source_schema("EventHeader")))
    refs = [{"name": header, "subject": header, "version": 1}]
    text = json.dumps(events.source_schema("PageViewEvent", 1))
    schema_id = store.register("PageViewEvent-value", text, references=refs)
    assert schema_id != header_id
    assert store.register("PageViewEvent-value", text, references=refs) == schema_id
    assert store.schema(schema_id)["references"] == refs
    assert json.loads(store.schema_text(schema_id))["fields"][0]["type"] in ("EventHeader", header)
    assert store.lookup("PageViewEvent-value", text, references=refs)["id"] == schema_id
    assert store.parsed(schema_id).to_json() == fastavro_free(events.load_schema("PageViewEvent", 1))
    evolved = json.dumps(events.source_schema("PageViewEvent", 2))
    assert store.check("PageViewEvent-value", None, evolved, references=refs) == []
    assert store.register("PageViewEvent-value", evolved, references=refs) > schema_id
    assert store.referenced_by(header, 1) == [schema_id, schema_id + 1]
    assert code_of(store.delete_version, header, 1) == 42206
    assert code_of(store.register, "x-value", text) == 42201
    missing = [{"name": header, "subject": header, "version": 9}]
    assert code_of(store.register, "x-value", text, references=missing) == 42201


def fastavro_free(schema: dict) -> dict:
    """`schema` as the avro package writes it back, to compare parsed forms."""
    return avro.schema.parse(json.dumps(schema)).to_json()
