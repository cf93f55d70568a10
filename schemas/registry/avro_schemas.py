"""Avro schemas as the registry treats them: parsing, the canonical form ids are given to, compatibility.

The canonical form is the schema parsed by the `avro` package and written back as compact JSON: two
texts of one schema (whitespace, attribute order) get one id, while docs, defaults and aliases still
count, as in the Confluent registry. Compatibility uses `avro.compatibility`'s checker.
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from . import errors


class CompatibilityLevel(str, Enum):
    """Confluent's compatibility levels; the non-transitive ones check against the latest version only."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def new_reads_old(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def old_reads_new(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


DEFAULT_LEVEL = CompatibilityLevel.BACKWARD


def parse_level(value: object) -> CompatibilityLevel:
    """The level named by `value` (any case); 42203 otherwise."""
    try:
        return CompatibilityLevel(str(value).upper())
    except ValueError:
        raise errors.invalid_compatibility_level(value) from None


def parse(schema_text: str, names: avro.name.Names | None = None) -> avro.schema.Schema:
    """The parsed schema; 42201 if `schema_text` is not a valid Avro schema.

    `names` holds the named types of the schema's references (it gains the schema's own types).
    """
    if not isinstance(schema_text, str) or not schema_text.strip():
        raise errors.invalid_schema("the schema is empty")
    try:
        return avro.schema.make_avsc_object(json.loads(schema_text), names)
    except (avro.errors.AvroException, json.JSONDecodeError, TypeError, ValueError, KeyError,
            AttributeError, RecursionError) as error:
        raise errors.invalid_schema(str(error) or type(error).__name__) from None


def canonical(schema_text: str, names: avro.name.Names | None = None) -> str:
    """The canonical JSON text of `schema_text`; 42201 if it is invalid."""
    return parse_canonical(schema_text, names)[0]


def parse_canonical(schema_text: str, names: avro.name.Names | None = None) -> tuple[str, avro.schema.Schema]:
    """(canonical JSON text, parsed schema) of `schema_text`; 42201 if it is invalid.

    Types defined by references (in `names`) stay references by name, as the schema text has them.
    """
    referenced = avro.name.Names()
    if names is not None:
        referenced.names = dict(names.names)
    parsed = parse(schema_text, names)
    return json.dumps(parsed.to_json(referenced), separators=(",", ":")), parsed


def fingerprint(canonical_text: str) -> str:
    return hashlib.sha256(canonical_text.encode()).hexdigest()


def _reasons(reader: avro.schema.Schema, writer: avro.schema.Schema, role: str) -> list[str]:
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = ", ".join(sorted(kind.value for kind in result.incompatibilities))
    return [f"{role}: {kinds} at {', '.join(sorted(result.locations))} ({', '.join(sorted(map(str, result.messages)))})"]


def incompatibilities(new_schema: avro.schema.Schema, existing: list[avro.schema.Schema],
                      level: CompatibilityLevel) -> list[str]:
    """Why schema `new_schema` cannot follow the `existing` versions (oldest first) at `level`; [] if it can."""
    if level is CompatibilityLevel.NONE or not existing:
        return []
    against = existing if level.transitive else existing[-1:]
    reasons: list[str] = []
    for old_schema in reversed(against):
        if level.new_reads_old:
            reasons += _reasons(new_schema, old_schema, "the new schema cannot read data written with an old one")
        if level.old_reads_new:
            reasons += _reasons(old_schema, new_schema, "an old schema cannot read data written with the new one")
    return reasons
