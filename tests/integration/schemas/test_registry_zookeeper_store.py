"""The registry store on a real ZooKeeper: instances share ids and subjects; concurrent ids stay unique."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import pytest

from pipeline.zk.client import connect
from schemas.registry import layout
from schemas.registry.backends import ZooKeeperBackend
from schemas.registry.errors import RegistryError
from schemas.registry.store import SchemaRegistryStore


def schema(index: int) -> str:
    return json.dumps({"type": "record", "name": f"R{index}", "fields": [{"name": "f", "type": "int"}]})


@pytest.fixture
def stores(zk_connect: str) -> Iterator[list[SchemaRegistryStore]]:
    opened = [SchemaRegistryStore(ZooKeeperBackend(connect(zk_connect))) for _ in range(2)]
    yield opened
    for store in opened:
        store.backend.close()


def test_two_instances_share_ids_subjects_and_config(stores: list[SchemaRegistryStore]) -> None:
    first, second = stores
    schema_id = first.register("a-value", schema(1))
    assert second.register("b-value", schema(1)) == schema_id
    assert second.version("a-value", "latest")["id"] == schema_id
    assert first.subjects() == ["a-value", "b-value"]
    first.set_config("a-value", "FULL")
    assert second.compatibility("a-value").value == "FULL"
    first.delete_subject("a-value")
    assert second.subjects() == ["b-value"]


def test_concurrent_registrations_get_distinct_ids_and_one_id_per_schema(
        stores: list[SchemaRegistryStore]) -> None:
    first, second = stores
    first.set_config(None, "NONE")
    jobs = [(store, f"s{index % 3}-value", schema(index % 10)) for index in range(40) for store in (first, second)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda job: job[0].register(job[1], job[2]), jobs))
    by_schema: dict[str, set[int]] = {}
    for (_, _, text), schema_id in zip(jobs, ids):
        by_schema.setdefault(text, set()).add(schema_id)
    assert all(len(found) == 1 for found in by_schema.values())
    assert len({next(iter(found)) for found in by_schema.values()}) == 10
    counter = int(first.backend.get(layout.ID_COUNTER))
    assert counter >= max(ids)
    for subject in first.subjects():
        registered = [first.version(subject, number)["id"] for number in first.versions(subject)]
        assert len(registered) == len(set(registered)), f"{subject} holds one schema twice: {registered}"


def test_concurrent_registrations_in_one_subject_are_each_checked_against_the_one_before(
        stores: list[SchemaRegistryStore]) -> None:
    first, second = stores
    base = {"type": "record", "name": "R", "fields": [{"name": "f", "type": "int"}]}
    first.register("r-value", json.dumps(base))
    # Each adds a field with a default (compatible with version 1) of an enum of its own symbol, so
    # no two of them can read each other's data: exactly one may follow version 1.
    candidates = [json.dumps({**base, "fields": base["fields"] + [
        {"name": "g", "type": {"type": "enum", "name": "G", "symbols": [f"S{index}"]}, "default": f"S{index}"}]})
        for index in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(lambda job: attempt(*job), zip([first, second] * 4, candidates)))
    assert outcomes.count(True) == 1, outcomes
    assert first.versions("r-value") == [1, 2]


def attempt(store: SchemaRegistryStore, text: str) -> bool:
    """Register `text` under r-value; False if it was refused as incompatible."""
    try:
        store.register("r-value", text)
    except RegistryError as error:
        assert error.code == 409
        return False
    return True


def test_a_new_instance_sees_everything_and_never_reuses_ids(zk_connect: str,
                                                           stores: list[SchemaRegistryStore]) -> None:
    first, _ = stores
    old = first.register("a-value", schema(1))
    first.delete_subject("a-value")
    first.delete_subject("a-value", permanent=True)
    restarted = SchemaRegistryStore(ZooKeeperBackend(connect(zk_connect)))
    try:
        assert restarted.schema_text(old) == first.schema_text(old)
        assert restarted.register("a-value", schema(2)) > old
        assert restarted.subjects(deleted=True) == ["a-value"]
    finally:
        restarted.backend.close()
