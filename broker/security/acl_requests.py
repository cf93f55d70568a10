"""DescribeAcls, CreateAcls and DeleteAcls answered from an AclAuthorizer: requests to filters and bindings,
results to response bodies (Kafka's AclApis). Whether the requester may call them is KafkaApis' check."""

from __future__ import annotations

from typing import TypeVar

from pipeline.protocol.errors import ErrorCode
from pipeline.security.acl import (AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter,
                                   AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                   ResourcePatternFilter, ResourceType)
from broker.security.authorizer import AclAuthorizer

E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)


def _code(kind: type[E], value: int) -> E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: refused below like any other invalid value


def binding_filter(entry: dict) -> AclBindingFilter:
    """The filter of a DescribeAcls request or of one DeleteAcls filter; ValueError when it cannot match anything
    (an UNKNOWN code, as Kafka refuses)."""
    selector = AclBindingFilter(
        ResourcePatternFilter(_code(ResourceType, entry["resource_type_filter"]), entry["resource_name_filter"],
                              _code(PatternType, entry.get("pattern_type_filter", PatternType.LITERAL))),
        AccessControlEntryFilter(entry["principal_filter"], entry["host_filter"],
                                 _code(AclOperation, entry["operation"]),
                                 _code(AclPermissionType, entry["permission_type"])))
    unknown = [kind.__name__ for kind, value in ((ResourceType, selector.pattern.resource_type),
                                                  (PatternType, selector.pattern.pattern_type),
                                                  (AclOperation, selector.entry.operation),
                                                  (AclPermissionType, selector.entry.permission_type)) if value == 0]
    if unknown:
        raise ValueError(f"the filter has an unknown {' and '.join(unknown)}")
    return selector


def creation_binding(entry: dict) -> AclBinding:
    """The binding of one CreateAcls creation (validated by the authorizer)."""
    return AclBinding(
        ResourcePattern(_code(ResourceType, entry["resource_type"]), entry["resource_name"],
                        _code(PatternType, entry.get("resource_pattern_type", PatternType.LITERAL))),
        AccessControlEntry(entry["principal"], entry["host"], _code(AclOperation, entry["operation"]),
                           _code(AclPermissionType, entry["permission_type"])))


def describe_acls(authorizer: AclAuthorizer, request: dict) -> dict:
    try:
        selector = binding_filter(request)
    except ValueError as exc:
        return describe_error(ErrorCode.INVALID_REQUEST, str(exc))
    by_pattern: dict[ResourcePattern, list[dict]] = {}
    for binding in authorizer.acls(selector):
        e = binding.entry
        by_pattern.setdefault(binding.pattern, []).append({
            "principal": e.principal, "host": e.host, "operation": int(e.operation),
            "permission_type": int(e.permission_type)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": [
        {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
         "acls": acls} for p, acls in by_pattern.items()]}


def describe_error(code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}


async def create_acls(authorizer: AclAuthorizer, request: dict) -> dict:
    errors = await authorizer.create_acls([creation_binding(c) for c in request["creations"]])
    return {"throttle_time_ms": 0, "results": [
        {"error_code": ErrorCode.NONE, "error_message": None} if error is None
        else {"error_code": ErrorCode.INVALID_REQUEST, "error_message": error} for error in errors]}


def create_error(request: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": message}
                                               for _ in request["creations"]]}


async def delete_acls(authorizer: AclAuthorizer, request: dict) -> dict:
    selectors: list[AclBindingFilter | None] = []
    refusals: dict[int, str] = {}
    for i, entry in enumerate(request["filters"]):
        try:
            selectors.append(binding_filter(entry))
        except ValueError as exc:
            selectors.append(None)
            refusals[i] = str(exc)
    valid = [s for s in selectors if s is not None]
    deleted = iter(await authorizer.delete_acls(valid))
    results = []
    for i, selector in enumerate(selectors):
        outcome = next(deleted) if selector is not None else refusals[i]
        if isinstance(outcome, str):
            code = ErrorCode.INVALID_REQUEST if selector is None else ErrorCode.UNKNOWN_SERVER_ERROR
            results.append({"error_code": code, "error_message": outcome, "matching_acls": []})
        else:
            results.append({"error_code": ErrorCode.NONE, "error_message": None,
                            "matching_acls": [_matching(b) for b in outcome]})
    return {"throttle_time_ms": 0, "filter_results": results}


def delete_error(request: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": []} for _ in request["filters"]]}


def _matching(binding: AclBinding) -> dict:
    p, e = binding.pattern, binding.entry
    return {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": int(p.resource_type),
            "resource_name": p.name, "pattern_type": int(p.pattern_type), "principal": e.principal, "host": e.host,
            "operation": int(e.operation), "permission_type": int(e.permission_type)}

