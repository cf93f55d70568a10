"""Requests generated from the protocol declarations (pipeline/protocol/messages.py), one per API and version
the broker advertises, so that a version advertised is a version exercised.

``minimal_body`` is every field at its declared default (empty arrays, zero numbers, empty strings), with the
few values a request needs to be answered rather than refused outright (``VALID_VALUES``); ``populated_body``
puts one default element in every array of structs, so that the handlers' per-topic and per-partition paths
run too. The fuzz test mutates these.
"""

from __future__ import annotations

from typing import Any, Iterator

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import SUPPORTED_VERSIONS, encode_request
from pipeline.protocol.messages import APIS
from pipeline.protocol.schema import Field

# Values a request needs to be answered at all: acks=0 Produce requests get no response.
VALID_VALUES: dict[int, dict[str, Any]] = {ApiKey.PRODUCE: {"acks": 1, "timeout_ms": 1000}}


def advertised() -> Iterator[tuple[int, int]]:
    """(api key, version) of every version of every API the protocol layer supports."""
    for key, (low, high) in sorted(SUPPORTED_VERSIONS.items()):
        for version in range(low, high + 1):
            yield key, version


def _body(fields: tuple[Field, ...], version: int, populate: bool) -> dict:
    body: dict[str, Any] = {}
    for field in fields:
        if not field.exists_in(version):
            continue
        if populate and field.is_struct_like:
            element = _body(field.fields, version, populate)
            body[field.key] = [element] if field.is_array else element
        else:
            body[field.key] = field.default_factory(version)()
    return body


def minimal_body(api_key: int, version: int) -> dict:
    """Every request field of the version at its default, plus ``VALID_VALUES``."""
    return {**_body(APIS[api_key].request, version, populate=False), **VALID_VALUES.get(api_key, {})}


def populated_body(api_key: int, version: int) -> dict:
    """Like :func:`minimal_body`, with one default element in each array of structs."""
    return {**_body(APIS[api_key].request, version, populate=True), **VALID_VALUES.get(api_key, {})}


def request_frame(api_key: int, version: int, correlation_id: int, body: dict, client_id: str = "declared") -> bytes:
    """The whole frame (length prefix included) of a request with ``body``."""
    return encode_request(api_key, version, correlation_id, client_id, body)
