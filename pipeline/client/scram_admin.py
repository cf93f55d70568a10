"""The AdminClient's SCRAM credential calls: DescribeUserScramCredentials and AlterUserScramCredentials.

As Kafka's Admin does, an upsertion sends the salted password computed here (a fresh random salt, PBKDF2 with
the mechanism's hash), never the password. The requests go to the controller, or any broker (every broker of
this project stores them: ZooKeeper's /config/users on a cluster, the log dir standalone).
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Iterable, Mapping

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.protocol.messages import SCRAM_MECHANISM_IDS
from pipeline.security.scram import MIN_ITERATIONS, salted_password

MECHANISM_NAMES = {number: name for name, number in SCRAM_MECHANISM_IDS.items()}
SALT_BYTES = 32


class ScramCredentialCalls:
    """The SCRAM calls of AdminClient (mixed into it); they use its ``_admin_request``."""

    _admin_request: Callable[[int, dict], dict]

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """``{user: {mechanism: iterations}}`` for ``users`` (default: every user with credentials). A user named
        who has none raises KafkaProtocolError (RESOURCE_NOT_FOUND), as any other error."""
        names = None if users is None else [{"name": user} for user in users]
        response = self._admin_request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": names})
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaProtocolError(response["error_code"], response.get("error_message") or "")
        described = {}
        for result in response["results"]:
            if result["error_code"] != ErrorCode.NONE:
                raise KafkaProtocolError(result["error_code"],
                                         result.get("error_message") or f"cannot describe user {result['user']!r}")
            described[result["user"]] = {MECHANISM_NAMES.get(info["mechanism"], str(info["mechanism"])):
                                         info["iterations"] for info in result["credential_infos"]}
        return described

    def alter_user_scram_credentials(self, upsertions: Mapping[str, Mapping[str, tuple[str, int]]] | None = None,
                                     deletions: Mapping[str, Iterable[str]] | None = None) -> None:
        """Set ``{user: {mechanism: (password, iterations)}}`` and delete ``{user: [mechanism, ...]}``; raises
        KafkaProtocolError for the first user the broker refused (the others were still changed)."""
        body: dict[str, Any] = {"upsertions": [], "deletions": []}
        for user, mechanisms in (upsertions or {}).items():
            for mechanism, (password, iterations) in mechanisms.items():
                salt = secrets.token_bytes(SALT_BYTES)
                body["upsertions"].append({
                    "name": user, "mechanism": SCRAM_MECHANISM_IDS.get(mechanism, 0),
                    "iterations": iterations or MIN_ITERATIONS, "salt": salt,
                    "salted_password": salted_password(mechanism, password, salt, iterations or MIN_ITERATIONS)})
        for user, mechanisms in (deletions or {}).items():
            body["deletions"].extend({"name": user, "mechanism": SCRAM_MECHANISM_IDS.get(mechanism, 0)}
                                     for mechanism in mechanisms)
        response = self._admin_request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        for result in response["results"]:
            if result["error_code"] != ErrorCode.NONE:
                raise KafkaProtocolError(result["error_code"],
                                         result.get("error_message") or f"cannot alter user {result['user']!r}")
