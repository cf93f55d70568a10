"""The classic Avro evolution cases at each compatibility level, as the registry checks them."""

from __future__ import annotations

import json

import pytest

from schemas.registry.avro_schemas import CompatibilityLevel, canonical, incompatibilities, parse


def user(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "User", "fields": list(fields)})


BASE = user({"name": "id", "type": "int"}, {"name": "name", "type": "string"})
ADDED_WITH_DEFAULT = user({"name": "id", "type": "int"}, {"name": "name", "type": "string"},
                          {"name": "email", "type": "string", "default": ""})
ADDED_WITHOUT_DEFAULT = user({"name": "id", "type": "int"}, {"name": "name", "type": "string"},
                             {"name": "email", "type": "string"})
REMOVED = user({"name": "id", "type": "int"})
RENAMED_WITH_ALIAS = user({"name": "id", "type": "int"}, {"name": "fullName", "type": "string", "aliases": ["name"]})
RENAMED_WITHOUT_ALIAS = user({"name": "id", "type": "int"}, {"name": "fullName", "type": "string"})
PROMOTED = user({"name": "id", "type": "long"}, {"name": "name", "type": "string"})
WIDENED = user({"name": "id", "type": "int"}, {"name": "name", "type": ["string", "null"]})


def ok(new: str, old: str, level: str) -> bool:
    return incompatibilities(parse(new), [parse(old)], CompatibilityLevel(level)) == []


@pytest.mark.parametrize(("new", "old", "backward", "forward"), [
    (ADDED_WITH_DEFAULT, BASE, True, True),
    (ADDED_WITHOUT_DEFAULT, BASE, False, True),
    (REMOVED, BASE, True, False),
    (RENAMED_WITH_ALIAS, BASE, True, False),
    (RENAMED_WITHOUT_ALIAS, BASE, False, False),
    (PROMOTED, BASE, True, False),
    (BASE, PROMOTED, False, True),
    (WIDENED, BASE, True, False),
    (BASE, WIDENED, False, True),
], ids=["added-with-default", "added-without-default", "removed", "alias-rename", "rename", "int-to-long",
        "long-to-int", "widened-union", "narrowed-union"])
def test_classic_cases(new: str, old: str, backward: bool, forward: bool) -> None:
    assert ok(new, old, "BACKWARD") is backward
    assert ok(new, old, "FORWARD") is forward
    assert ok(new, old, "FULL") is (backward and forward)
    assert ok(new, old, "NONE")


def test_transitive_levels_check_every_version_the_others_only_the_latest() -> None:
    first = user({"name": "id", "type": "int"})
    second = user({"name": "id", "type": "int"}, {"name": "a", "type": "int", "default": 0})
    third = user({"name": "id", "type": "int"}, {"name": "a", "type": "int"})
    history = [parse(first), parse(second)]
    assert incompatibilities(parse(third), history, CompatibilityLevel.BACKWARD) == []
    assert incompatibilities(parse(third), history, CompatibilityLevel.BACKWARD_TRANSITIVE) != []


def test_canonical_form_ignores_layout_and_attribute_order() -> None:
    reordered = json.dumps({"fields": [{"type": "int", "name": "id"}, {"type": "string", "name": "name"}],
                            "name": "User", "type": "record"}, indent=2)
    assert canonical(reordered) == canonical(BASE)
    assert canonical(ADDED_WITH_DEFAULT) != canonical(ADDED_WITHOUT_DEFAULT)
