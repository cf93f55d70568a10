"""Sample bodies for protocol tests: every field of a version filled with a non-default value."""

from __future__ import annotations

import random
import uuid
from typing import Any

from pipeline.protocol.schema import Field

_INT_RANGES = {
    "int8": (-128, 127),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def sample_value(type_name: str, rng: random.Random) -> Any:
    """A random value of a primitive type (strings include non-ASCII text)."""
    if type_name in _INT_RANGES:
        low, high = _INT_RANGES[type_name]
        return rng.choice([low, high, rng.randint(low, high), 1])
    if type_name == "bool":
        return rng.random() < 0.5
    if type_name == "float64":
        return rng.uniform(-1e9, 1e9)
    if type_name == "string":
        return rng.choice(["topic-a", "", "zürich-ü", "x" * rng.randint(1, 300)])
    if type_name in ("bytes", "records"):
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
    if type_name == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    raise AssertionError(type_name)


def sample_body(fields: tuple[Field, ...], version: int, rng: random.Random) -> dict:
    """A body with every field of ``version`` set; nullable fields are sometimes None."""
    body: dict = {}
    for f in fields:
        if not f.exists_in(version):
            continue
        if f.nullable_in(version) and rng.random() < 0.25:
            body[f.key] = None
        elif f.is_array:
            n = rng.randint(0, 3)
            if f.is_struct_like:
                body[f.key] = [sample_body(f.fields, version, rng) for _ in range(n)]
            else:
                body[f.key] = [sample_value(f.element_type_name, rng) for _ in range(n)]
        elif f.is_struct_like:
            body[f.key] = sample_body(f.fields, version, rng)
        else:
            body[f.key] = sample_value(f.type, rng)
    return body


def normalize(value: Any) -> Any:
    """Decoded values with memoryviews turned into bytes, for comparisons."""
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value


def _declared_keys(fields: tuple[Field, ...], version: int) -> set[str]:
    return {f.key for f in fields if f.exists_in(version)}


def test_sample_bodies_set_every_field_of_the_version() -> None:
    from pipeline.protocol.messages import APIS

    rng = random.Random(1)
    for api in APIS.values():
        for version in api.version_range:
            for fields in (api.request, api.response):
                body = sample_body(fields, version, rng)
                assert set(body) == _declared_keys(fields, version)
