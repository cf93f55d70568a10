"""The SCRAM credentials the broker authenticates with, in memory, and a standalone broker's file of them.

:class:`CredentialStore` holds ``user -> {mechanism: ScramCredential}`` for the SASL mechanisms to look up on
the event loop; a backend persists changes and refreshes the cache: :class:`FileCredentialStore` (a standalone
broker: one owner-only JSON file in its log dir, replaced atomically) or the ZooKeeper store
(broker/security/zk_credential_store.py), both in Kafka's user config format (pipeline.security.scram_users).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

from pipeline.durable_file import write_atomically
from pipeline.protocol.errors import ErrorCode
from pipeline.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, ScramCredential
from pipeline.security.scram_users import UserCredentials, parse_user_config

log = logging.getLogger(__name__)

FILE_NAME = "scram-credentials.json"


class Upsertion(NamedTuple):
    """A credential to set: AlterUserScramCredentials' upsertion with the stored form computed (None when the
    request's salt or salted password is empty)."""

    user: str
    mechanism: str
    iterations: int
    credential: ScramCredential | None


class AlterResult(NamedTuple):
    """One user's outcome of AlterUserScramCredentials."""

    user: str
    error_code: int
    error_message: str | None


def check_alteration(deletions: Iterable[tuple[str, str]], upsertions: Iterable[Upsertion],
                     existing: Mapping[str, UserCredentials]) -> dict[str, tuple[int, str]]:
    """Kafka's checks of an AlterUserScramCredentials request: user -> (error, message) for each refused user
    (a user named twice for one mechanism, an empty name, an unknown mechanism, iterations out of range, a
    deletion of a credential that is not there)."""
    refused: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, str]] = set()
    deletions, upsertions = list(deletions), list(upsertions)
    for user, mechanism in [*deletions, *((u.user, u.mechanism) for u in upsertions)]:
        if (user, mechanism) in seen:
            refused.setdefault(user, (ErrorCode.DUPLICATE_RESOURCE,
                                      "a user credential cannot be altered twice in the same request"))
        seen.add((user, mechanism))
        if not user:
            refused.setdefault(user, (ErrorCode.UNACCEPTABLE_CREDENTIAL, "username must not be empty"))
        elif mechanism not in MECHANISMS:
            refused.setdefault(user, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "unknown SCRAM mechanism"))
    for upsertion in upsertions:
        iterations = upsertion.iterations
        if upsertion.credential is None:
            refused.setdefault(upsertion.user, (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                                "salt and salted password must not be empty"))
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            refused.setdefault(upsertion.user, (
                ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}"))
    for user, mechanism in deletions:
        if mechanism in MECHANISMS and mechanism not in existing.get(user, {}):
            refused.setdefault(user, (ErrorCode.RESOURCE_NOT_FOUND,
                                      "attempt to delete a user credential that does not exist"))
    return refused


def apply_alteration(current: UserCredentials, user: str, deletions: Iterable[tuple[str, str]],
                     upsertions: Iterable[Upsertion]) -> UserCredentials:
    """``user``'s credentials after the request's deletions and upsertions of that user."""
    result = dict(current)
    for name, mechanism in deletions:
        if name == user:
            result.pop(mechanism, None)
    for upsertion in upsertions:
        if upsertion.user == user and upsertion.credential is not None:
            result[upsertion.mechanism] = upsertion.credential
    return result


class CredentialStore:
    """The credentials by user, read on the event loop by the SASL mechanisms; writes go to a backend."""

    def __init__(self) -> None:
        self._users: dict[str, UserCredentials] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def credentials(self, user: str) -> UserCredentials:
        return dict(self._users.get(user, {}))

    def users(self) -> list[str]:
        return sorted(user for user, credentials in self._users.items() if credentials)

    def snapshot(self) -> dict[str, UserCredentials]:
        return {user: dict(credentials) for user, credentials in self._users.items()}

    def set_user(self, user: str, credentials: UserCredentials) -> None:
        """Replace one user's credentials in the cache (one assignment: safe from a ZooKeeper thread)."""
        if credentials:
            self._users[user] = dict(credentials)
        else:
            self._users.pop(user, None)

    async def alter(self, deletions: list[tuple[str, str]], upsertions: list[Upsertion]) -> list[AlterResult]:
        """Apply an AlterUserScramCredentials request (checked as Kafka does); one result per user named."""
        refused = check_alteration(deletions, upsertions, self._users)
        users = list(dict.fromkeys([user for user, _ in deletions] + [u.user for u in upsertions]))
        changes = {user: apply_alteration(self._users.get(user, {}), user, deletions, upsertions)
                   for user in users if user not in refused}
        failed = await self._persist(changes) if changes else {}
        results = []
        for user in users:
            code, message = refused.get(user) or failed.get(user) or (ErrorCode.NONE, None)
            results.append(AlterResult(user, code, message))
        return results

    async def _persist(self, changes: dict[str, UserCredentials]) -> dict[str, tuple[int, str]]:
        """Store the users' new credentials and update the cache; the users that failed, with why."""
        for user, credentials in changes.items():
            self.set_user(user, credentials)
        return {}


class FileCredentialStore(CredentialStore):
    """A standalone broker's credentials: ``<log dir>/scram-credentials.json``, owner-only, replaced atomically."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__()
        self.path = log_dir / FILE_NAME
        try:
            users = json.loads(self.path.read_bytes())["users"]
        except FileNotFoundError:
            users = {}
        for user, config in users.items():
            self.set_user(user, parse_user_config(json.dumps({"config": config}).encode()))

    async def _persist(self, changes: dict[str, UserCredentials]) -> dict[str, tuple[int, str]]:
        users = self.snapshot()
        users.update(changes)
        data = {"users": {user: {m: c.to_string() for m, c in sorted(creds.items())}
                          for user, creds in sorted(users.items()) if creds}}
        try:
            write_atomically(self.path, json.dumps(data, indent=1).encode(), mode=0o600)
        except OSError as exc:
            log.error("cannot write %s: %s", self.path, exc)
            return {user: (ErrorCode.KAFKA_STORAGE_ERROR, "the credentials could not be stored") for user in changes}
        return await super()._persist(changes)
