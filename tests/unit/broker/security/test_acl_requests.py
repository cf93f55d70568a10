"""DescribeAcls, CreateAcls and DeleteAcls bodies to and from the authorizer: filters with unknown codes refused
with INVALID_REQUEST (one DeleteAcls filter at a time), invalid creations refused one by one, matches answered
with Kafka's codes."""

from __future__ import annotations

import asyncio

from broker.security import acl_requests
from broker.security.authorizer import AclAuthorizer
from pipeline.protocol.errors import ErrorCode
from pipeline.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.support.acls import MemoryAclStore


def creation(name: str, kind: int = ResourceType.TOPIC, pattern: int = PatternType.LITERAL,
             operation: int = AclOperation.READ) -> dict:
    return {"resource_type": kind, "resource_name": name, "resource_pattern_type": pattern, "principal": "User:a",
            "host": "*", "operation": operation, "permission_type": AclPermissionType.ALLOW}


def selector(name: str | None, pattern: int = PatternType.ANY, kind: int = ResourceType.ANY) -> dict:
    return {"resource_type_filter": kind, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": None, "host_filter": None, "operation": AclOperation.ANY,
            "permission_type": AclPermissionType.ANY}


def test_create_describe_delete():
    async def scenario():
        authorizer = AclAuthorizer(MemoryAclStore())
        created = await acl_requests.create_acls(authorizer, {"creations": [
            creation("t"), creation("p-", pattern=PatternType.PREFIXED), creation("x", operation=99),
            creation("c", kind=ResourceType.CLUSTER)]})
        assert [r["error_code"] for r in created["results"]] == [0, 0, ErrorCode.INVALID_REQUEST,
                                                                  ErrorCode.INVALID_REQUEST]
        described = acl_requests.describe_acls(authorizer, selector("p-1", PatternType.MATCH))
        assert [(r["resource_name"], r["pattern_type"]) for r in described["resources"]] == [("p-", 4)]
        assert described["resources"][0]["acls"] == [{"principal": "User:a", "host": "*", "operation": 3,
                                                      "permission_type": 3}]
        unknown = acl_requests.describe_acls(authorizer, selector("t", pattern=0))
        assert unknown["error_code"] == ErrorCode.INVALID_REQUEST
        deleted = await acl_requests.delete_acls(authorizer, {"filters": [selector("t", kind=0), selector("t")]})
        first, second = deleted["filter_results"]
        assert first["error_code"] == ErrorCode.INVALID_REQUEST and first["matching_acls"] == []
        assert second["error_code"] == 0 and [m["resource_name"] for m in second["matching_acls"]] == ["t"]
        assert acl_requests.describe_acls(authorizer, selector(None))["resources"][0]["resource_name"] == "p-"
    asyncio.run(scenario())
