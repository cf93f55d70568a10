"""The registry's rules over a `Backend`: one id per distinct schema, versions per subject, deletes, config, mode.

Every instance reads and writes the backend, so several instances on one ZooKeeper serve the same
state. Ids come from one counter raised atomically and are created together with the schema's
fingerprint in one multi-op: a schema registered concurrently by two instances ends up with one id
(the loser's id is skipped, never handed out again), and ids are never reused, even after a hard
delete, because the counter only grows. A new version is created only if its number is still free,
else the registration starts again: two instances registering in one subject at once never add one
schema twice nor skip the compatibility check against the version the other added. Schemas by id never
change, so they are cached per process.

Schema references are Confluent's: a list of {"name", "subject", "version"} naming registered versions
whose types the schema uses by name. The types are resolved (transitively) to parse and check the
schema; the canonical text keeps them as names, and one id stands for a text with its references. A
version that a live schema references cannot be deleted (42206).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import avro.name
import avro.schema

from . import errors, layout
from .avro_schemas import (DEFAULT_LEVEL, CompatibilityLevel, fingerprint, incompatibilities, parse, parse_canonical,
                           parse_level)
from .backends import Backend

SUPPORTED_TYPES = ("AVRO",)
MODES = ("READWRITE", "READONLY")
MAX_VERSION = 2**31 - 1


def _json(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


def _encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def parse_version(value: object) -> int | None:
    """A version number from a path or body, None for "latest" (or -1); 42202 otherwise."""
    text = str(value)
    if text == "latest" or text == "-1":
        return None
    if text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_VERSION:
        return int(text)
    raise errors.invalid_version(value)


class SchemaRegistryStore:
    """The Confluent registry's operations, blocking, over one backend shared by every instance."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._schemas: dict[int, dict[str, Any]] = {}
        self._parsed: dict[int, avro.schema.Schema] = {}
        self._ids: dict[str, int] = {}
        self._cache_lock = threading.Lock()

    # -- schemas by id ----------------------------------------------------------------------------

    def cached_schema(self, schema_id: int) -> dict[str, Any] | None:
        """{"schema"[, "references"]} of `schema_id` if this process has read it before (no backend call)."""
        return self._schemas.get(schema_id)

    def schema(self, schema_id: int) -> dict[str, Any]:
        """{"schema": canonical text[, "references": [...]]} of `schema_id`; 40403 if it was never allocated."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        record = _json(self.backend.get(layout.schema_path(schema_id)))
        if record is None:
            raise errors.schema_not_found()
        shown = {"schema": record["schema"]}
        if record.get("references"):
            shown["references"] = record["references"]
        with self._cache_lock:
            self._schemas[schema_id] = shown
        return shown

    def schema_text(self, schema_id: int) -> str:
        """The canonical text of schema `schema_id`; 40403 if no such id was allocated."""
        return self.schema(schema_id)["schema"]

    def parsed(self, schema_id: int) -> avro.schema.Schema:
        """Schema `schema_id` parsed with the types of its references."""
        cached = self._parsed.get(schema_id)
        if cached is None:
            cached = self._parse_into(avro.name.Names(), schema_id, set())
            with self._cache_lock:
                self._parsed[schema_id] = cached
        return cached

    def _parse_into(self, names: avro.name.Names, schema_id: int, seen: set[int]) -> avro.schema.Schema:
        record = self.schema(schema_id)
        self._resolve_into(names, record.get("references", []), seen)
        return parse(record["schema"], names)

    def _resolve_into(self, names: avro.name.Names, references: Any, seen: set[int]) -> None:
        """Add the named types of `references` (Confluent's {"name", "subject", "version"}) to `names`."""
        if not isinstance(references, list):
            raise errors.invalid_schema("references must be a list")
        for reference in references:
            if not isinstance(reference, dict) or not {"name", "subject", "version"} <= set(reference):
                raise errors.invalid_schema(f"a reference needs name, subject and version: {reference}")
            try:
                target = self.version(str(reference["subject"]), reference["version"])["id"]
            except errors.RegistryError:
                raise errors.invalid_schema(f"reference {reference['name']} to subject {reference['subject']} "
                                            f"version {reference['version']} not found") from None
            if target not in seen:
                seen.add(target)
                self._parse_into(names, target, seen)

    def _prepare(self, schema_text: str, references: Any) -> tuple[str, list[Any], avro.schema.Schema]:
        """(canonical text, references, parsed schema) of a request's schema; 42201 if invalid."""
        references = references or []
        names = avro.name.Names()
        self._resolve_into(names, references, set())
        text, parsed = parse_canonical(schema_text, names)
        return text, references, parsed

    @staticmethod
    def _identity(canonical_text: str, references: list[Any]) -> str:
        """What one id stands for: the canonical text, and the references if there are any."""
        return json.dumps([canonical_text, references], sort_keys=True) if references else canonical_text

    def _id_of(self, identity: str) -> int | None:
        cached = self._ids.get(identity)
        if cached is not None:
            return cached
        data = self.backend.get(layout.fingerprint_path(fingerprint(identity)))
        if data is None:
            return None
        with self._cache_lock:
            self._ids[identity] = int(data)
        return int(data)

    def _allocate(self, canonical_text: str, references: list[Any]) -> int:
        """The id of the schema, allocated now if no instance has allocated one yet."""
        identity = self._identity(canonical_text, references)
        record = {"schema": canonical_text, "schemaType": "AVRO"}
        if references:
            record["references"] = references
        while True:
            known = self._id_of(identity)
            if known is not None:
                return known
            candidate = self.backend.increment(layout.ID_COUNTER)
            if self.backend.create_all([(layout.schema_path(candidate), _encode(record)),
                                        (layout.fingerprint_path(fingerprint(identity)),
                                         str(candidate).encode())]):
                return candidate

    def subject_versions_of_id(self, schema_id: int) -> list[tuple[str, int]]:
        """(subject, version) of every live version registered with schema `schema_id`."""
        self.schema_text(schema_id)
        found = []
        for subject in self.subjects():
            for version, record in sorted(self._versions(subject).items()):
                if record["id"] == schema_id and not record["deleted"]:
                    found.append((subject, version))
        return found

    def referenced_by(self, subject: str, version: object) -> list[int]:
        """Ids of the schemas whose references name this version of `subject`."""
        number = self.version(subject, version, deleted=True)["version"]
        found = []
        for name in self.backend.children(layout.SCHEMAS):
            for reference in self.schema(int(name)).get("references", []):
                if reference.get("subject") == subject and str(reference.get("version")) == str(number):
                    found.append(int(name))
        return sorted(found)

    def _refuse_if_referenced(self, subject: str, numbers: list[int]) -> None:
        for number in numbers:
            if any(self.subject_versions_of_id(user) for user in self.referenced_by(subject, number)):
                raise errors.reference_exists(subject, number)

    # -- subjects and versions --------------------------------------------------------------------

    def _versions(self, subject: str) -> dict[int, dict[str, Any]]:
        """Version -> {"id", "deleted"} of every version of `subject`, soft-deleted ones included."""
        path = layout.subject_path(subject)
        found = {}
        for name in self.backend.children(path):
            record = _json(self.backend.get(f"{path}/{name}"))
            if record is not None:
                found[int(name)] = record
        return found

    def subjects(self, deleted: bool = False) -> list[str]:
        """Subjects with a live version (with `deleted`, also those whose versions are all soft-deleted)."""
        names = []
        for segment in self.backend.children(layout.SUBJECTS):
            subject = layout.unquote_name(segment)
            records = self._versions(subject).values()
            if any(deleted or not record["deleted"] for record in records):
                names.append(subject)
        return sorted(names)

    def _existing(self, subject: str, deleted: bool) -> dict[int, dict[str, Any]]:
        """The versions of `subject` to serve (live only unless `deleted`); 40401 if there is none."""
        versions = self._versions(subject)
        shown = {n: r for n, r in versions.items() if deleted or not r["deleted"]}
        if not shown:
            raise errors.subject_not_found(subject)
        return shown

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return sorted(self._existing(subject, deleted))

    def version(self, subject: str, version: object, deleted: bool = False) -> dict[str, Any]:
        """{"subject", "version", "id", "schema"[, "references"]} of one version ("latest": the newest live)."""
        number = parse_version(version)
        shown = self._existing(subject, deleted)
        if number is None:
            number = max(shown)
        record = shown.get(number)
        if record is None:
            raise errors.version_not_found(subject, version)
        return {"subject": subject, "version": number, "id": record["id"], **self.schema(record["id"])}

    def lookup(self, subject: str, schema_text: str, schema_type: str | None = None,
               deleted: bool = False, references: Any = None) -> dict[str, Any]:
        """The version of `subject` holding the schema; 40401 for no subject, 40403 for no such schema."""
        check_type(schema_type)
        shown = self._existing(subject, deleted)
        text, references, _ = self._prepare(schema_text, references)
        schema_id = self._id_of(self._identity(text, references))
        for number in sorted(shown, reverse=True):
            if shown[number]["id"] == schema_id:
                return {"subject": subject, "version": number, "id": schema_id, **self.schema(schema_id)}
        raise errors.schema_not_found()

    def register(self, subject: str, schema_text: str, schema_type: str | None = None,
                 references: Any = None) -> int:
        """The id of `schema_text` under `subject`, adding a version if it is new there (409 if incompatible)."""
        check_type(schema_type)
        if self.mode() != "READWRITE":
            raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode")
        text, references, parsed = self._prepare(schema_text, references)
        while True:
            registered = self._add_version(subject, text, references, parsed)
            if registered is not None:
                return registered

    def _add_version(self, subject: str, text: str, references: list[Any],
                     parsed: avro.schema.Schema) -> int | None:
        """One attempt to register the schema after the versions seen now; None if another writer added a
        version meanwhile (the caller starts again, so the check is always against the true latest)."""
        known = self._id_of(self._identity(text, references))
        versions = self._versions(subject)
        live = sorted(n for n, r in versions.items() if not r["deleted"])
        if known is not None and any(versions[n]["id"] == known for n in live):
            return known
        reasons = incompatibilities(parsed, [self.parsed(versions[n]["id"]) for n in live],
                                    self.compatibility(subject))
        if reasons:
            raise errors.incompatible(reasons)
        schema_id = self._allocate(text, references)
        number = max(versions, default=0) + 1
        record = _encode({"id": schema_id, "deleted": False})
        return schema_id if self.backend.create_all([(layout.version_path(subject, number), record)]) else None

    def check(self, subject: str, version: object | None, schema_text: str,
              schema_type: str | None = None, references: Any = None) -> list[str]:
        """Why the schema is not compatible with `subject` (all live versions when `version` is None)."""
        check_type(schema_type)
        _, _, parsed = self._prepare(schema_text, references)
        level = self.compatibility(subject)
        if version is None:
            try:
                shown = self._existing(subject, False)
            except errors.RegistryError:
                return []
            return incompatibilities(parsed, [self.parsed(shown[n]["id"]) for n in sorted(shown)], level)
        existing = self.parsed(self.version(subject, version)["id"])
        return incompatibilities(parsed, [existing], CompatibilityLevel(level.value.replace("_TRANSITIVE", "")))

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Soft-delete every live version, or with `permanent` remove the soft-deleted subject entirely."""
        versions = self._versions(subject)
        if not versions:
            raise errors.subject_not_found(subject)
        live = sorted(n for n, r in versions.items() if not r["deleted"])
        if permanent:
            if live:
                raise errors.subject_not_soft_deleted(subject)
            self.backend.delete(layout.subject_path(subject))
            return sorted(versions)
        if not live:
            raise errors.subject_soft_deleted(subject)
        self._refuse_if_referenced(subject, live)
        for number in live:
            self.backend.put(layout.version_path(subject, number),
                             _encode({"id": versions[number]["id"], "deleted": True}))
        return live

    def delete_version(self, subject: str, version: object, permanent: bool = False) -> int:
        """Soft-delete one version, or with `permanent` remove a soft-deleted one; returns its number."""
        number = parse_version(version)
        versions = self._versions(subject)
        if not versions:
            raise errors.subject_not_found(subject)
        if number is None:
            live = [n for n, r in versions.items() if not r["deleted"]]
            if not live:
                raise errors.version_not_found(subject, version)
            number = max(live)
        record = versions.get(number)
        if record is None:
            raise errors.version_not_found(subject, version)
        if permanent:
            if not record["deleted"]:
                raise errors.version_not_soft_deleted(subject, number)
            self.backend.delete(layout.version_path(subject, number))
        else:
            if record["deleted"]:
                raise errors.version_soft_deleted(subject, number)
            self._refuse_if_referenced(subject, [number])
            self.backend.put(layout.version_path(subject, number), _encode({"id": record["id"], "deleted": True}))
        return number

    # -- config and mode --------------------------------------------------------------------------

    def config(self, subject: str | None) -> CompatibilityLevel | None:
        """The level set for `subject` (None: the global one), None if none is set."""
        record = _json(self.backend.get(layout.config_path(subject)))
        return None if record is None else CompatibilityLevel(record["compatibilityLevel"])

    def compatibility(self, subject: str | None) -> CompatibilityLevel:
        """The level in force: the subject's, else the global one, else BACKWARD."""
        return (subject is not None and self.config(subject)) or self.config(None) or DEFAULT_LEVEL

    def set_config(self, subject: str | None, level: object) -> CompatibilityLevel:
        parsed = parse_level(level)
        self.backend.put(layout.config_path(subject), _encode({"compatibilityLevel": parsed.value}))
        return parsed

    def delete_config(self, subject: str | None) -> CompatibilityLevel:
        """Remove the level set for `subject` (or the global one); returns the level that was in force."""
        previous = self.compatibility(subject)
        if subject is not None and self.config(subject) is None:
            raise errors.subject_not_found(subject)
        self.backend.delete(layout.config_path(subject))
        return previous

    def mode(self) -> str:
        record = _json(self.backend.get(layout.MODE))
        return "READWRITE" if record is None else record["mode"]

    def set_mode(self, mode: object) -> str:
        if str(mode).upper() not in MODES:
            raise errors.invalid_mode(mode)
        self.backend.put(layout.MODE, _encode({"mode": str(mode).upper()}))
        return str(mode).upper()


def check_type(schema_type: str | None) -> None:
    """42201 for a schemaType other than AVRO (the default when absent)."""
    if schema_type is not None and schema_type.upper() not in SUPPORTED_TYPES:
        raise errors.invalid_schema(f"schemaType {schema_type} is not supported by this registry "
                                    f"(supported: {', '.join(SUPPORTED_TYPES)})")
