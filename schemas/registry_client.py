"""A client of the Confluent Schema Registry API that asks the registry once per schema and process.

`SchemaRegistryClient` registers or looks up a schema under a subject and fetches schemas by id. Ids are
immutable in the registry, so every answer is cached for the life of the client: a producer asks once per
(subject, schema) and a consumer once per schema id it meets, as the paper's section 5 says of the
schema lookup. It is safe to share between threads; concurrent misses for one key ask the registry once.
A secured registry is reached with :class:`~schemas.registry_client_settings.RegistryClientSettings` (basic
login, HTTPS trust and client certificate); :meth:`SchemaRegistryClient.from_config` reads them from a service's
configuration.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from typing import Any, Callable, Hashable, Mapping, TypeVar

import fastavro
import httpx

from .registry_client_settings import NO_REGISTRY_SECURITY, RegistryClientSettings

__all__ = ["SchemaRegistryClient", "SchemaRegistryError", "RegisteredSchema"]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

T = TypeVar("T")


class SchemaRegistryError(Exception):
    """The registry refused a request (HTTP status and Confluent `error_code`) or could not be reached
    (status and code 0)."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(f"schema registry: {message} (HTTP {status}, error code {code})" if status
                         else f"schema registry: {message}")
        self.status = status
        self.code = code
        self.message = message


class RegisteredSchema:
    """A schema as the registry stores it: its id, its text, and the fastavro form parsed once."""

    __slots__ = ("schema_id", "text", "parsed")

    def __init__(self, schema_id: int, text: str, named: dict[str, Any] | None = None) -> None:
        self.schema_id = schema_id
        self.text = text
        # `named`: the types of the schema's references, parsed already (fastavro's named_schemas).
        self.parsed = fastavro.parse_schema(json.loads(text), named_schemas=dict(named or {}))

    def __repr__(self) -> str:
        return f"RegisteredSchema(id={self.schema_id})"


class SchemaRegistryClient:
    """Registers, looks up and fetches Avro schemas at `url` (one or several registry instances,
    comma-separated: a request that cannot reach one is tried on the next)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0,
                 settings: RegistryClientSettings = NO_REGISTRY_SECURITY) -> None:
        self.urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        if not self.urls:
            raise ValueError("a schema registry URL is required, e.g. http://localhost:8081")
        tls = settings.ssl_context() if any(u.lower().startswith("https:") for u in self.urls) else True
        # Without a USER_INFO login, httpx takes one from a URL's user:password@ (Confluent's URL source).
        self._http = httpx.Client(timeout=timeout_s, headers={"Accept": _CONTENT_TYPE}, auth=settings.auth,
                                  verify=tls)
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}
        self._by_id: dict[int, RegisteredSchema] = {}
        self._ids: dict[tuple[str, str], int] = {}
        self.requests = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any, *, timeout_s: float = 10.0) -> "SchemaRegistryClient":
        """The client of a service's configuration: ``schema.registry.url`` and the registry client settings."""
        return cls(config["schema.registry.url"], timeout_s=timeout_s,
                   settings=RegistryClientSettings.from_config(config))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "SchemaRegistryClient":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- the API --------------------------------------------------------------------------------------

    def register(self, subject: str, schema: Mapping[str, Any] | str) -> int:
        """The id of `schema` under `subject`, registering it there if it is new (the registry answers
        409 if it is incompatible with the subject's versions)."""
        text = _text(schema)
        return self._cached(self._ids, (subject, text), lambda: int(
            self._request("POST", f"/subjects/{_quote(subject)}/versions", {"schema": text})["id"]))

    def lookup(self, subject: str, schema: Mapping[str, Any] | str) -> int:
        """The id of `schema` if it is already registered under `subject` (SchemaRegistryError 40403
        or 40401 if not); registers nothing."""
        text = _text(schema)
        return self._cached(self._ids, (subject, text), lambda: int(
            self._request("POST", f"/subjects/{_quote(subject)}", {"schema": text})["id"]))

    def schema(self, schema_id: int) -> RegisteredSchema:
        """The schema registered with `schema_id` (asked once per process)."""
        return self._cached(self._by_id, schema_id, lambda: self._resolved(
            schema_id, self._request("GET", f"/schemas/ids/{int(schema_id)}")))

    def latest(self, subject: str) -> tuple[int, int, RegisteredSchema]:
        """(id, version, schema) of the latest version under `subject`; asked every time (it changes)."""
        body = self._request("GET", f"/subjects/{_quote(subject)}/versions/latest")
        schema_id = int(body["id"])
        registered = self._cached(self._by_id, schema_id, lambda: self._resolved(schema_id, body))
        return schema_id, int(body["version"]), registered

    def _resolved(self, schema_id: int, body: Mapping[str, Any]) -> RegisteredSchema:
        """The schema of a registry answer, its references (Confluent schema references) fetched and
        parsed first, depth first, so that the types it names only are known."""
        named: dict[str, Any] = {}
        self._parse_references(body.get("references") or [], named, set())
        return RegisteredSchema(schema_id, body["schema"], named)

    def _parse_references(self, references: list, named: dict[str, Any], seen: set) -> None:
        for reference in references:
            where = (reference["subject"], int(reference["version"]))
            if where in seen:
                continue
            seen.add(where)
            body = self._request("GET", f"/subjects/{_quote(where[0])}/versions/{where[1]}")
            self._parse_references(body.get("references") or [], named, seen)
            fastavro.parse_schema(json.loads(body["schema"]), named_schemas=named)

    # -- plumbing -------------------------------------------------------------------------------------

    def _cached(self, cache: dict, key: Hashable, load: Callable[[], T]) -> T:
        found = cache.get(key)
        if found is not None:
            return found
        with self._lock:
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            found = cache.get(key)
            if found is None:
                found = load()
                cache[key] = found
        with self._lock:
            self._loading.pop(key, None)
        return found

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        content = None if body is None else json.dumps(body)
        headers = None if body is None else {"Content-Type": _CONTENT_TYPE}
        failure: Exception | None = None
        for base in self.urls:
            self.requests += 1
            try:
                response = self._http.request(method, base + path, content=content, headers=headers)
            except httpx.HTTPError as exc:
                failure = exc
                continue
            try:
                answer = response.json()
            except ValueError:
                answer = None
            if response.status_code >= 400:
                if isinstance(answer, dict) and "error_code" in answer:
                    raise SchemaRegistryError(response.status_code, int(answer["error_code"]),
                                              str(answer.get("message", "")))
                raise SchemaRegistryError(response.status_code, response.status_code,
                                          response.text[:200] or response.reason_phrase)
            if answer is None:
                raise SchemaRegistryError(response.status_code, 0, f"{method} {path} answered no JSON")
            return answer
        raise SchemaRegistryError(0, 0, f"cannot reach {', '.join(map(_without_login, self.urls))}: {failure}")


def _text(schema: Mapping[str, Any] | str) -> str:
    return schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))


def _without_login(url: str) -> str:
    """``url`` without a ``user:password@`` (error messages get logged)."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")
