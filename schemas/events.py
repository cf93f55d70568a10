"""The pipeline's Avro schemas: loading the `.avsc` files shipped in `schemas/avro`, topics and subjects.

Each named type lives in one file, `<Name>.avsc` for its first version and `<Name>.v<N>.avsc` for
version N. A file refers to a type defined in another file by name only (every event's `header` field
is just `"EventHeader"`), so the shared records are written once. `load_schema` returns the resolved
form: a self-contained schema in which each referenced type is defined inline at its first use, as
Avro parsers, fastavro and the Confluent registry all accept it. References resolve to the latest
version of the referenced type.

Topics follow one rule: one topic per schema, named by the record's name (`PageViewEvent`), and the
registry subject of a topic's values is `<topic>-value` (Confluent's TopicNameStrategy).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from importlib import resources
from typing import Any

import fastavro

NAMESPACE = "com.linkedin.events"
"""The namespace of every schema here; a type's full name is `com.linkedin.events.<Name>`."""

HEADER_NAME = "EventHeader"
"""The record every event embeds as its first field, `header`."""

ACTIVITY_EVENT_NAMES: tuple[str, ...] = (
    "PageViewEvent",
    "ClickEvent",
    "SearchEvent",
    "ProfileViewEvent",
    "AdImpressionEvent",
)
OPERATIONAL_EVENT_NAMES: tuple[str, ...] = ("ServiceCallEvent", "SystemMetricsEvent")
EVENT_NAMES: tuple[str, ...] = ACTIVITY_EVENT_NAMES + OPERATIONAL_EVENT_NAMES
"""The events frontend servers publish, each with an EventHeader first."""

AUDIT_NAME = "AuditCount"
"""The audit message's schema (it has no EventHeader: it counts events, it is not one)."""

EVENT_TOPICS: dict[str, str] = {name: name for name in EVENT_NAMES}
"""Topic name -> schema name of its values, one topic per event type."""

AUDIT_TOPIC = AUDIT_NAME
"""The topic the audit counts are published to, named by the same rule as the event topics."""

_PRIMITIVE_TYPES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})

_FILE_NAME = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.v(?P<version>[1-9][0-9]*))?\.avsc")


def subject_for(topic: str) -> str:
    """Registry subject of the values of `topic` under Confluent's TopicNameStrategy."""
    return f"{topic}-value"


def versions(name: str) -> list[int]:
    """The versions of schema `name` shipped in the package, oldest first; KeyError if there is none."""
    return sorted(_index()[_short_name(name)])


def source_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """Schema `name` as its `.avsc` file has it, other files' types referenced by name only.

    `version` None means the latest. The dict is a fresh copy the caller may change.
    """
    return copy.deepcopy(_source(_short_name(name), _pick_version(name, version)))


def references(name: str, version: int | None = None) -> list[str]:
    """Full names of the types defined in other files that schema `name`'s own file refers to, in order.

    These are what a registration with Confluent schema references would list.
    """
    short = _short_name(name)
    source = _source(short, _pick_version(name, version))
    found: list[str] = []
    _walk_references(source, NAMESPACE, set(), found)
    return [full for full in found if full != f"{NAMESPACE}.{short}"]


def load_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """The resolved, self-contained schema `name` (short or full name) as a JSON-compatible dict.

    `version` None means the latest version shipped. Every referenced type is defined inline at its
    first use and referred to by name after that. The dict is a fresh copy the caller may change.
    """
    return json.loads(_resolved_json(_short_name(name), _pick_version(name, version)))


@functools.lru_cache(maxsize=None)
def parsed_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """`load_schema(name, version)` parsed by `fastavro.parse_schema`, cached; do not modify it."""
    return fastavro.parse_schema(load_schema(name, version))


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, dict[int, str]]:
    """Short name -> version -> file name, for every `.avsc` file in the package."""
    index: dict[str, dict[int, str]] = {}
    for entry in (resources.files(__package__) / "avro").iterdir():
        match = _FILE_NAME.fullmatch(entry.name)
        if match is None:
            continue
        version = int(match.group("version") or 1)
        index.setdefault(match.group("name"), {})[version] = entry.name
    return index


@functools.lru_cache(maxsize=None)
def _source(short: str, version: int) -> dict[str, Any]:
    file_name = _index()[short][version]
    schema = json.loads((resources.files(__package__) / "avro" / file_name).read_text(encoding="utf-8"))
    if schema.get("name") != short or schema.get("namespace") != NAMESPACE:
        raise ValueError(f"{file_name} defines {schema.get('namespace')}.{schema.get('name')}, "
                         f"not {NAMESPACE}.{short}")
    return schema


@functools.lru_cache(maxsize=None)
def _resolved_json(short: str, version: int) -> str:
    resolved = _resolve(_source(short, version), NAMESPACE, set(), ())
    return json.dumps(resolved)


def _short_name(name: str) -> str:
    prefix = NAMESPACE + "."
    short = name[len(prefix):] if name.startswith(prefix) else name
    if short not in _index():
        raise KeyError(f"no schema named {name!r} in the schemas package")
    return short


def _pick_version(name: str, version: int | None) -> int:
    available = versions(name)
    if version is None:
        return available[-1]
    if version not in available:
        raise KeyError(f"schema {name!r} has no version {version} (versions: {available})")
    return version


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name else f"{namespace}.{name}"


def _resolve(node: Any, namespace: str, defined: set[str], outer: tuple[str, ...]) -> Any:
    """A copy of schema `node` with named types from other files inlined at their first use.

    `defined` collects the full names defined so far in depth-first (field) order, the order in which
    Avro parsers meet the definitions; `outer` holds the files being inlined, to refuse cycles.
    """
    if isinstance(node, str):
        if node in _PRIMITIVE_TYPES or _full_name(node, namespace) in defined:
            return node
        full = _full_name(node, namespace)
        short = full.rsplit(".", 1)[1]
        if not full.startswith(NAMESPACE + ".") or short not in _index() or full in outer:
            raise ValueError(f"unknown or recursive type {node!r}")
        target = _source(short, versions(short)[-1])
        return _resolve(target, NAMESPACE, defined, outer + (full,))
    if isinstance(node, list):
        return [_resolve(branch, namespace, defined, outer) for branch in node]
    if not isinstance(node, dict):
        raise ValueError(f"not a schema: {node!r}")
    result = dict(node)
    kind = node.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        full = _full_name(node["name"], node.get("namespace", namespace))
        defined.add(full)
        inner_namespace = full.rsplit(".", 1)[0]
        if kind in ("record", "error"):
            result["fields"] = [
                {**field, "type": _resolve(field["type"], inner_namespace, defined, outer)}
                for field in node["fields"]
            ]
    elif kind == "array":
        result["items"] = _resolve(node["items"], namespace, defined, outer)
    elif kind == "map":
        result["values"] = _resolve(node["values"], namespace, defined, outer)
    else:
        result["type"] = _resolve(kind, namespace, defined, outer)
    return result


def _walk_references(node: Any, namespace: str, defined: set[str], found: list[str]) -> None:
    """Append to `found` the full names `node` refers to without defining them, first use first."""
    if isinstance(node, str):
        full = _full_name(node, namespace)
        if node not in _PRIMITIVE_TYPES and full not in defined and full not in found:
            found.append(full)
    elif isinstance(node, list):
        for branch in node:
            _walk_references(branch, namespace, defined, found)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            full = _full_name(node["name"], node.get("namespace", namespace))
            defined.add(full)
            for field in node.get("fields", ()):
                _walk_references(field["type"], full.rsplit(".", 1)[0], defined, found)
        elif kind == "array":
            _walk_references(node["items"], namespace, defined, found)
        elif kind == "map":
            _walk_references(node["values"], namespace, defined, found)
        else:
            _walk_references(kind, namespace, defined, found)
