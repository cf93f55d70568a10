"""The registry's rules over a `Backend`: one id per distinct schema, versions per subject, deletes, config, mode.

Every instance reads and writes the backend, so several instances on one ZooKeeper serve the same
state. Ids come from one counter raised atomically and are created together with the schema's
fingerprint in one multi-op: a schema registered concurrently by two instances ends up with one id
(the loser's id is skipped, never handed out again), and ids are never reused, even after a hard
delete, because the counter only grows. A new version is created only if its number is still free,
else the registration starts again: two instances registering in one subject at once never add one
schema twice nor skip the compatibility check against the version the other added. Schemas by id never
change, so they are cached per process.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from . import errors, layout
from .avro_schemas import DEFAULT_LEVEL, CompatibilityLevel, canonical, fingerprint, incompatibilities, parse_level
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
    if text.isdigit() and 1 <= int(text) <= MAX_VERSION:
        return int(text)
    raise errors.invalid_version(value)


class SchemaRegistryStore:
    """The Confluent registry's operations, blocking, over one backend shared by every instance."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._schemas: dict[int, str] = {}
        self._ids: dict[str, int] = {}
        self._cache_lock = threading.Lock()

    # -- schemas by id ----------------------------------------------------------------------------

    def cached_schema_text(self, schema_id: int) -> str | None:
        """The canonical text of schema `schema_id` if this process has read it before (no backend call)."""
        return self._schemas.get(schema_id)

    def schema_text(self, schema_id: int) -> str:
        """The canonical text of schema `schema_id`; 40403 if no such id was allocated."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        record = _json(self.backend.get(layout.schema_path(schema_id)))
        if record is None:
            raise errors.schema_not_found()
        with self._cache_lock:
            self._schemas[schema_id] = record["schema"]
        return record["schema"]

    def _id_of(self, canonical_text: str) -> int | None:
        cached = self._ids.get(canonical_text)
        if cached is not None:
            return cached
        data = self.backend.get(layout.fingerprint_path(fingerprint(canonical_text)))
        if data is None:
            return None
        with self._cache_lock:
            self._ids[canonical_text] = int(data)
        return int(data)

    def _allocate(self, canonical_text: str) -> int:
        """The id of `canonical_text`, allocated now if no instance has allocated one yet."""
        while True:
            known = self._id_of(canonical_text)
            if known is not None:
                return known
            candidate = self.backend.increment(layout.ID_COUNTER)
            record = _encode({"schema": canonical_text, "schemaType": "AVRO"})
            if self.backend.create_all([(layout.schema_path(candidate), record),
                                        (layout.fingerprint_path(fingerprint(canonical_text)),
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
        """{"subject", "version", "id", "schema"} of one version ("latest" is the newest live one)."""
        number = parse_version(version)
        shown = self._existing(subject, deleted)
        if number is None:
            number = max(shown)
        record = shown.get(number)
        if record is None:
            raise errors.version_not_found(subject, version)
        return {"subject": subject, "version": number, "id": record["id"],
                "schema": self.schema_text(record["id"])}

    def lookup(self, subject: str, schema_text: str, schema_type: str | None = None,
               deleted: bool = False) -> dict[str, Any]:
        """The version of `subject` holding `schema_text`; 40401 for no subject, 40403 for no such schema."""
        check_type(schema_type)
        text = canonical(schema_text)
        shown = self._existing(subject, deleted)
        schema_id = self._id_of(text)
        for number in sorted(shown, reverse=True):
            if shown[number]["id"] == schema_id:
                return {"subject": subject, "version": number, "id": schema_id, "schema": text}
        raise errors.schema_not_found()

    def register(self, subject: str, schema_text: str, schema_type: str | None = None,
                 references: list[Any] | None = None) -> int:
        """The id of `schema_text` under `subject`, adding a version if it is new there (409 if incompatible)."""
        check_type(schema_type)
        if references:
            raise errors.invalid_schema("schema references are not supported by this registry")
        if self.mode() != "READWRITE":
            raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode")
        text = canonical(schema_text)
        while True:
            registered = self._add_version(subject, text)
            if registered is not None:
                return registered

    def _add_version(self, subject: str, text: str) -> int | None:
        """One attempt to register `text` after the versions seen now; None if another writer added a
        version meanwhile (the caller starts again, so the check is always against the true latest)."""
        known = self._id_of(text)
        versions = self._versions(subject)
        live = sorted(n for n, r in versions.items() if not r["deleted"])
        if known is not None and any(versions[n]["id"] == known for n in live):
            return known
        reasons = incompatibilities(text, [self.schema_text(versions[n]["id"]) for n in live],
                                    self.compatibility(subject))
        if reasons:
            raise errors.incompatible(reasons)
        schema_id = self._allocate(text)
        number = max(versions, default=0) + 1
        record = _encode({"id": schema_id, "deleted": False})
        return schema_id if self.backend.create_all([(layout.version_path(subject, number), record)]) else None

    def check(self, subject: str, version: object | None, schema_text: str,
              schema_type: str | None = None) -> list[str]:
        """Why `schema_text` is not compatible with `subject` (all live versions when `version` is None)."""
        check_type(schema_type)
        text = canonical(schema_text)
        level = self.compatibility(subject)
        if version is None:
            try:
                shown = self._existing(subject, False)
            except errors.RegistryError:
                return []
            return incompatibilities(text, [self.schema_text(shown[n]["id"]) for n in sorted(shown)], level)
        existing = self.version(subject, version)["schema"]
        return incompatibilities(text, [existing], CompatibilityLevel(level.value.replace("_TRANSITIVE", "")))

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
