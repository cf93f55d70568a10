"""The credential store: Kafka's checks of AlterUserScramCredentials, the standalone broker's file, and the
Describe/Alter responses built from it."""

from __future__ import annotations

import asyncio
import json

from broker.security.credential_store import FILE_NAME, CredentialStore, FileCredentialStore, Upsertion
from broker.security.scram_admin import alter_user_scram_credentials, describe_user_scram_credentials
from pipeline.protocol.errors import ErrorCode
from pipeline.security.scram import new_credential, password_matches, salted_password


def upsertion(user: str, mechanism: str = "SCRAM-SHA-512", password: str = "pw", iterations: int = 4096) -> Upsertion:
    return Upsertion(user, mechanism, iterations, new_credential(mechanism, password, iterations))


def alter(store: CredentialStore, deletions=(), upsertions=()) -> dict[str, int]:
    results = asyncio.run(store.alter(list(deletions), list(upsertions)))
    return {r.user: r.error_code for r in results}


def test_upsertions_and_deletions_change_the_cache():
    store = CredentialStore()
    assert alter(store, upsertions=[upsertion("alice"), upsertion("alice", "SCRAM-SHA-256")]) == {"alice": 0}
    assert set(store.credentials("alice")) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert alter(store, deletions=[("alice", "SCRAM-SHA-512")]) == {"alice": 0}
    assert set(store.credentials("alice")) == {"SCRAM-SHA-256"}
    assert alter(store, deletions=[("alice", "SCRAM-SHA-256")]) == {"alice": 0}
    assert store.users() == []


def test_kafkas_checks_refuse_per_user():
    store = CredentialStore()
    results = alter(store, deletions=[("ghost", "SCRAM-SHA-512"), ("twice", "SCRAM-SHA-512")],
                    upsertions=[upsertion("twice"), upsertion("few", iterations=1000), upsertion("many", iterations=20000),
                                upsertion("", "SCRAM-SHA-512"), Upsertion("odd", "UNKNOWN", 4096, None),
                                Upsertion("empty", "SCRAM-SHA-512", 4096, None), upsertion("fine")])
    assert results == {"ghost": ErrorCode.RESOURCE_NOT_FOUND, "twice": ErrorCode.DUPLICATE_RESOURCE,
                       "few": ErrorCode.UNACCEPTABLE_CREDENTIAL, "many": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                       "": ErrorCode.UNACCEPTABLE_CREDENTIAL, "odd": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                       "empty": ErrorCode.UNACCEPTABLE_CREDENTIAL, "fine": ErrorCode.NONE}
    assert store.users() == ["fine"]


def test_the_standalone_file_is_owner_only_in_kafkas_format_and_read_back(tmp_path):
    store = FileCredentialStore(tmp_path)
    assert alter(store, upsertions=[upsertion("alice", password="secret")]) == {"alice": 0}
    path = tmp_path / FILE_NAME
    assert path.stat().st_mode & 0o777 == 0o600
    stored = json.loads(path.read_text())["users"]["alice"]["SCRAM-SHA-512"]
    assert stored.startswith("salt=") and "iterations=4096" in stored and "secret" not in path.read_text()
    again = FileCredentialStore(tmp_path)
    assert password_matches("SCRAM-SHA-512", again.get("alice", "SCRAM-SHA-512"), "secret")


def test_describe_lists_mechanisms_and_iterations_and_flags_unknown_and_repeated_users():
    store = CredentialStore()
    alter(store, upsertions=[upsertion("alice", iterations=8192), upsertion("alice", "SCRAM-SHA-256")])
    everyone = describe_user_scram_credentials(store, {"users": None})
    assert everyone["results"] == [{"user": "alice", "error_code": 0, "error_message": None,
                                    "credential_infos": [{"mechanism": 1, "iterations": 4096},
                                                         {"mechanism": 2, "iterations": 8192}]}]
    named = describe_user_scram_credentials(store, {"users": [{"name": "bob"}, {"name": "alice"}, {"name": "alice"}]})
    assert [r["error_code"] for r in named["results"]] == [ErrorCode.RESOURCE_NOT_FOUND, 0,
                                                           ErrorCode.DUPLICATE_RESOURCE]


def test_alter_stores_the_credential_of_the_salted_password_the_client_sent():
    store = CredentialStore()
    salt = b"0123456789abcdef"
    request = {"deletions": [], "upsertions": [{"name": "alice", "mechanism": 2, "iterations": 4096, "salt": salt,
                                                "salted_password": salted_password("SCRAM-SHA-512", "pw", salt, 4096)},
                                               {"name": "bob", "mechanism": 9, "iterations": 4096, "salt": salt,
                                                "salted_password": b"x"}]}
    response = asyncio.run(alter_user_scram_credentials(store, request))
    assert [(r["user"], r["error_code"]) for r in response["results"]] == [
        ("alice", 0), ("bob", ErrorCode.UNSUPPORTED_SASL_MECHANISM)]
    assert password_matches("SCRAM-SHA-512", store.get("alice", "SCRAM-SHA-512"), "pw")
