"""The registry's znode paths (relative to the cluster chroot), like `pipeline.zk.layout` for the broker.

The directory backend uses the same paths below its data directory.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

ROOT = "/schema_registry"
ID_COUNTER = f"{ROOT}/id_counter"
"""The last schema id allocated; raised with a versioned update, so ids are never handed out twice."""
SCHEMAS = f"{ROOT}/schemas"
"""`<id>` -> the schema's canonical JSON and type."""
FINGERPRINTS = f"{ROOT}/fingerprints"
"""`<sha256 of the canonical form>` -> the id of that schema (one id per distinct schema)."""
SUBJECTS = f"{ROOT}/subjects"
"""`<quoted subject>/<version>` -> {"id": ..., "deleted": ...}."""
CONFIG = f"{ROOT}/config"
"""`_global` and `<quoted subject>` -> {"compatibilityLevel": ...}."""
MODE = f"{ROOT}/mode"

GLOBAL_CONFIG_NODE = "_global"


def quote_name(name: str) -> str:
    """A subject name as one path segment (no '/', no leading '.')."""
    return quote(name, safe="").replace(".", "%2E")


def unquote_name(segment: str) -> str:
    return unquote(segment)


def schema_path(schema_id: int) -> str:
    return f"{SCHEMAS}/{schema_id}"


def fingerprint_path(fingerprint: str) -> str:
    return f"{FINGERPRINTS}/{fingerprint}"


def subject_path(subject: str) -> str:
    return f"{SUBJECTS}/{quote_name(subject)}"


def version_path(subject: str, version: int) -> str:
    return f"{subject_path(subject)}/{version}"


def config_path(subject: str | None) -> str:
    return f"{CONFIG}/{GLOBAL_CONFIG_NODE if subject is None else quote_name(subject)}"
