"""DescribeUserScramCredentials and AlterUserScramCredentials: the responses, from the request and a CredentialStore.

As Kafka answers them: Describe names every user with credentials (or those asked for: RESOURCE_NOT_FOUND for
one without, DUPLICATE_RESOURCE for one asked twice) with each mechanism's iteration count, never the
credential; Alter takes upsertions carrying the salted password the client computed (the password never
travels) and deletions, and answers one result per user named. Which broker serves them: any (a ZooKeeper
cluster's broker writes /config/users and the change notification itself; Kafka sends them to the controller).
"""

from __future__ import annotations

from broker.security.credential_store import CredentialStore, Upsertion
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import SCRAM_MECHANISM_IDS
from pipeline.security.scram import credential_from_salted_password

MECHANISM_NAMES = {number: name for name, number in SCRAM_MECHANISM_IDS.items()}


def describe_user_scram_credentials(store: CredentialStore, request: dict) -> dict:
    """The DescribeUserScramCredentials response body."""
    asked = request.get("users")
    names = store.users() if asked is None else [user["name"] for user in asked]
    results, seen = [], set()
    for name in names:
        result = {"user": name, "error_code": ErrorCode.NONE, "error_message": None, "credential_infos": []}
        credentials = store.credentials(name)
        if name in seen:
            result.update(error_code=ErrorCode.DUPLICATE_RESOURCE, error_message="cannot describe the same user twice")
        elif not credentials:
            result.update(error_code=ErrorCode.RESOURCE_NOT_FOUND,
                          error_message="attempt to describe a user credential that does not exist")
        else:
            result["credential_infos"] = [{"mechanism": SCRAM_MECHANISM_IDS[mechanism],
                                           "iterations": credential.iterations}
                                          for mechanism, credential in sorted(credentials.items())]
        seen.add(name)
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def _upsertion(entry: dict) -> Upsertion:
    mechanism = MECHANISM_NAMES.get(entry["mechanism"], "UNKNOWN")
    salt, salted = bytes(entry["salt"]), bytes(entry["salted_password"])
    credential = None
    if salt and salted and mechanism != "UNKNOWN":
        credential = credential_from_salted_password(mechanism, salt, salted, entry["iterations"])
    return Upsertion(entry["name"], mechanism, entry["iterations"], credential)


async def alter_user_scram_credentials(store: CredentialStore, request: dict) -> dict:
    """The AlterUserScramCredentials response body, once the changes are stored."""
    deletions = [(entry["name"], MECHANISM_NAMES.get(entry["mechanism"], "UNKNOWN")) for entry in request["deletions"]]
    upsertions = [_upsertion(entry) for entry in request["upsertions"]]
    results = await store.alter(deletions, upsertions)
    return {"throttle_time_ms": 0,
            "results": [{"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
                        for r in results]}
