"""The HTTP API of the Confluent Schema Registry on aiohttp, over a `SchemaRegistryStore`.

Handlers run the store's blocking backend calls on worker threads, so a slow ZooKeeper never stalls
the event loop; a schema already read by id is answered from memory. Every error is the API's JSON
error body; ZooKeeper trouble becomes 50001 (store error) or 50002 (timeout). `/metrics` serves
Prometheus metrics: requests by endpoint, method and status, their latency, and failed logins. With
``authentication.method=BASIC`` every request needs a user of the users file whose roles allow it
(:mod:`.access`): 401 (error code 40101) without valid credentials, 403 (40301) when the roles do not allow it,
as Confluent's security plugin answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Awaitable, Callable

from aiohttp import web
from kazoo.exceptions import KazooException
from prometheus_client import CollectorRegistry, Counter, Histogram

from pipeline.security.http_auth import basic_auth_middleware
from pipeline.security.http_settings import HttpSecurity
from pipeline.service.metrics_server import metrics_response
from pipeline.zk.client import ZooKeeperTimeout

from . import errors
from .access import Access
from .store import SUPPORTED_TYPES, SchemaRegistryStore, parse_version

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
LOG = logging.getLogger("schemas.registry")
STORE_KEY = web.AppKey("store", SchemaRegistryStore)
METRICS_KEY = web.AppKey("metrics", object)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Metrics:
    """The service's Prometheus metrics, in a collector registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("schema_registry_requests_total", "HTTP requests by endpoint, method and status",
                                ["endpoint", "method", "status"], registry=self.registry)
        self.latency = Histogram("schema_registry_request_seconds", "HTTP request latency by endpoint and method",
                                 ["endpoint", "method"], registry=self.registry,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.failed_logins = Counter("schema_registry_failed_logins_total",
                                     "HTTP basic logins refused, by reason (bad_credentials, malformed)",
                                     ["reason"], registry=self.registry)


def reply(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(value).encode(), status=status, content_type=CONTENT_TYPE)


def flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


async def body(request: web.Request) -> dict[str, Any]:
    try:
        value = json.loads(await request.read() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise errors.bad_request(f"Malformed JSON body: {error}") from None
    if not isinstance(value, dict):
        raise errors.bad_request("The request body must be a JSON object")
    return value


def schema_field(value: dict[str, Any]) -> str:
    schema = value.get("schema")
    if not isinstance(schema, str):
        raise errors.invalid_schema("the request has no \"schema\" string")
    return schema


def schema_id(request: web.Request) -> int:
    text = request.match_info["id"]
    if not (text.isascii() and text.isdigit()):
        raise errors.schema_not_found()
    return int(text)


async def run(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(call, *args, **kwargs)


@web.middleware
async def api_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as the API's JSON bodies, and the request metrics."""
    metrics: Metrics = request.app[METRICS_KEY]
    route = request.match_info.route.resource
    endpoint = route.canonical if route is not None else "unmatched"
    started = time.perf_counter()
    try:
        response = await handler(request)
    except errors.RegistryError as error:
        response = reply(error.body(), error.status)
    except web.HTTPException as error:
        response = reply({"error_code": error.status, "message": error.reason}, error.status)
    except ZooKeeperTimeout as error:
        failure = errors.store_timeout(str(error))
        response = reply(failure.body(), failure.status)
    except (KazooException, OSError) as error:
        failure = errors.store_error(f"{type(error).__name__}: {error}")
        response = reply(failure.body(), failure.status)
    except Exception as error:  # a bug must cost one request its answer, never the service
        LOG.exception("%s %s failed", request.method, request.path)
        response = reply({"error_code": 500, "message": f"Internal server error: {type(error).__name__}"}, 500)
    metrics.requests.labels(endpoint, request.method, str(response.status)).inc()
    metrics.latency.labels(endpoint, request.method).observe(time.perf_counter() - started)
    return response


def store_of(request: web.Request) -> SchemaRegistryStore:
    return request.app[STORE_KEY]


async def root(request: web.Request) -> web.Response:
    return reply({})


async def register(request: web.Request) -> web.Response:
    value = await body(request)
    schema_id_ = await run(store_of(request).register, request.match_info["subject"], schema_field(value),
                           value.get("schemaType"), value.get("references"))
    return reply({"id": schema_id_})


async def lookup(request: web.Request) -> web.Response:
    value = await body(request)
    return reply(await run(store_of(request).lookup, request.match_info["subject"], schema_field(value),
                           value.get("schemaType"), flag(request, "deleted"), value.get("references")))


async def schema_record(request: web.Request) -> dict[str, Any]:
    store = store_of(request)
    wanted = schema_id(request)
    cached = store.cached_schema(wanted)
    return cached if cached is not None else await run(store.schema, wanted)


async def schema_by_id(request: web.Request) -> web.Response:
    return reply(await schema_record(request))


async def raw_schema_by_id(request: web.Request) -> web.Response:
    return reply(json.loads((await schema_record(request))["schema"]))


async def versions_of_id(request: web.Request) -> web.Response:
    found = await run(store_of(request).subject_versions_of_id, schema_id(request))
    return reply([{"subject": subject, "version": version} for subject, version in found])


async def subjects_of_id(request: web.Request) -> web.Response:
    found = await run(store_of(request).subject_versions_of_id, schema_id(request))
    return reply(sorted({subject for subject, _ in found}))


async def types(request: web.Request) -> web.Response:
    return reply(list(SUPPORTED_TYPES))


async def subjects(request: web.Request) -> web.Response:
    return reply(await run(store_of(request).subjects, flag(request, "deleted")))


async def versions(request: web.Request) -> web.Response:
    return reply(await run(store_of(request).versions, request.match_info["subject"], flag(request, "deleted")))


async def version(request: web.Request) -> web.Response:
    return reply(await run(store_of(request).version, request.match_info["subject"], request.match_info["version"],
                           flag(request, "deleted")))


async def raw_version(request: web.Request) -> web.Response:
    found = await run(store_of(request).version, request.match_info["subject"], request.match_info["version"],
                      flag(request, "deleted"))
    return reply(json.loads(found["schema"]))


async def referenced_by(request: web.Request) -> web.Response:
    return reply(await run(store_of(request).referenced_by, request.match_info["subject"],
                           request.match_info["version"]))


async def delete_subject(request: web.Request) -> web.Response:
    return reply(await run(store_of(request).delete_subject, request.match_info["subject"],
                           flag(request, "permanent")))


async def delete_version(request: web.Request) -> web.Response:
    return reply(await run(store_of(request).delete_version, request.match_info["subject"],
                           request.match_info["version"], flag(request, "permanent")))


async def compatibility(request: web.Request) -> web.Response:
    value = await body(request)
    version_ = request.match_info.get("version")
    if version_ is not None:
        parse_version(version_)
    reasons = await run(store_of(request).check, request.match_info["subject"], version_, schema_field(value),
                        value.get("schemaType"), value.get("references"))
    result: dict[str, Any] = {"is_compatible": not reasons}
    if flag(request, "verbose"):
        result["messages"] = reasons
    return reply(result)


def config_subject(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def get_config(request: web.Request) -> web.Response:
    store = store_of(request)
    subject = config_subject(request)
    level = await run(store.config, subject)
    if level is None:
        if subject is not None and not flag(request, "defaultToGlobal"):
            raise errors.subject_level_config_not_found(subject)
        level = await run(store.compatibility, None)
    return reply({"compatibilityLevel": level.value})


async def put_config(request: web.Request) -> web.Response:
    value = await body(request)
    level = await run(store_of(request).set_config, config_subject(request), value.get("compatibility"))
    return reply({"compatibility": level.value})


async def delete_config(request: web.Request) -> web.Response:
    level = await run(store_of(request).delete_config, config_subject(request))
    return reply({"compatibilityLevel": level.value})


async def get_mode(request: web.Request) -> web.Response:
    return reply({"mode": await run(store_of(request).mode)})


async def put_mode(request: web.Request) -> web.Response:
    value = await body(request)
    return reply({"mode": await run(store_of(request).set_mode, value.get("mode"))})


async def metrics(request: web.Request) -> web.Response:
    return metrics_response(request.app[METRICS_KEY].registry)


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/", root),
    ("GET", "/metrics", metrics),
    ("GET", "/schemas/types", types),
    ("GET", "/schemas/ids/{id}", schema_by_id),
    ("GET", "/schemas/ids/{id}/schema", raw_schema_by_id),
    ("GET", "/schemas/ids/{id}/versions", versions_of_id),
    ("GET", "/schemas/ids/{id}/subjects", subjects_of_id),
    ("GET", "/subjects", subjects),
    ("POST", "/subjects/{subject}", lookup),
    ("DELETE", "/subjects/{subject}", delete_subject),
    ("GET", "/subjects/{subject}/versions", versions),
    ("POST", "/subjects/{subject}/versions", register),
    ("GET", "/subjects/{subject}/versions/{version}", version),
    ("DELETE", "/subjects/{subject}/versions/{version}", delete_version),
    ("GET", "/subjects/{subject}/versions/{version}/schema", raw_version),
    ("GET", "/subjects/{subject}/versions/{version}/referencedby", referenced_by),
    ("POST", "/compatibility/subjects/{subject}/versions", compatibility),
    ("POST", "/compatibility/subjects/{subject}/versions/{version}", compatibility),
    ("GET", "/config", get_config),
    ("PUT", "/config", put_config),
    ("DELETE", "/config", delete_config),
    ("GET", "/config/{subject}", get_config),
    ("PUT", "/config/{subject}", put_config),
    ("DELETE", "/config/{subject}", delete_config),
    ("GET", "/mode", get_mode),
    ("PUT", "/mode", put_mode),
]


def auth_error(status: int, message: str) -> web.Response:
    """401, 403 and 429 as the API's error bodies (Confluent's codes: 40101, 40301; ours 42901)."""
    return reply({"error_code": status * 100 + 1, "message": message}, status)


def make_app(store: SchemaRegistryStore, security: HttpSecurity | None = None,
             access: Access | None = None) -> web.Application:
    """The registry's aiohttp application over `store`; with `security` BASIC, requests are authenticated and
    `access` decides what each user's roles allow."""
    metrics_ = Metrics()
    middlewares = [api_middleware]
    authenticator = security.authenticator("schema registry", metrics_.failed_logins) if security else None
    if authenticator is not None:
        if access is None:
            raise ValueError("BASIC authentication needs the access rules")
        middlewares.append(basic_auth_middleware(authenticator, auth_error, allowed=access.allows,
                                                 skip_paths=security.skip_paths))  # type: ignore[union-attr]
    app = web.Application(middlewares=middlewares)
    app[STORE_KEY] = store
    app[METRICS_KEY] = metrics_
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    return app
