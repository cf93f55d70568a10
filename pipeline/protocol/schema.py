"""The vocabulary for declaring Kafka messages as data, in the shape of Kafka's JSON message specs.

A message is a list of :class:`Field`; a field has Kafka's CamelCase name, a type string as in the
specs (``"int32"``, ``"string"``, ``"records"``, ``"[]int32"``, ``"[]SomeStruct"`` with ``fields``,
or ``"SomeStruct"`` with ``fields``), the versions it exists in, the versions it may be null in, its
default, and for tagged fields its tag and tagged versions. Version ranges use the specs' notation:
``"3+"``, ``"0-4"``, ``"5"``, ``"none"``. :class:`Api` pairs a request and a response under one api
key. The codec compiles these declarations; nothing here reads or writes bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field as dataclass_field
from typing import Any, Callable

from pipeline.protocol.types import PRIMITIVES, FieldType

_NO_DEFAULT = object()
_MAX_VERSION = 0x7FFF


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; ``Versions.parse("3+")``, ``"0-4"``, ``"7"`` or ``"none"``."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        """Parse the specs' notation; None and ``"none"`` give an empty range."""
        if text is None or text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), _MAX_VERSION)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    def __iter__(self):
        return iter(range(self.low, self.high + 1))


NO_VERSIONS = Versions(0, -1)


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name as a Python key: ThrottleTimeMs -> throttle_time_ms."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return name.lower()


@dataclass(frozen=True, eq=False)
class Field:
    """One field of a message or nested struct, as declared in Kafka's message specs.

    ``type`` is the specs' type string. Structs and arrays of structs carry their ``fields``.
    ``default`` is the value used when a body omits the field (and for absent tagged fields);
    when not given it is the type's zero: 0, False, "", [], None for records, or None if the
    spec says ``"default": "null"`` (pass ``default=None``).
    """

    name: str
    type: str
    versions: str
    nullable: str | None = None
    default: Any = _NO_DEFAULT
    tag: int | None = None
    tagged: str | None = None
    fields: tuple["Field", ...] = ()
    key: str = dataclass_field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", snake_case(self.name))
        object.__setattr__(self, "fields", tuple(self.fields))
        if (self.tag is None) != (self.tagged is None):
            raise ValueError(f"{self.name}: tag and tagged versions go together")
        if self.is_struct_like and not self.fields:
            raise ValueError(f"{self.name}: struct type {self.type} needs fields")
        if not self.is_struct_like and self.element_type_name not in PRIMITIVES:
            raise ValueError(f"{self.name}: unknown type {self.type}")

    @property
    def is_array(self) -> bool:
        """True for ``[]T`` fields."""
        return self.type.startswith("[]")

    @property
    def element_type_name(self) -> str:
        """The type of the value, or of each element for arrays."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct_like(self) -> bool:
        """True when the value (or each element) is a nested struct declared by ``fields``."""
        return self.element_type_name not in PRIMITIVES

    @property
    def primitive(self) -> FieldType | None:
        """The primitive type of the value or of each array element; None for structs."""
        return PRIMITIVES.get(self.element_type_name)

    def exists_in(self, version: int) -> bool:
        """Whether the field is part of this version at all."""
        return version in Versions.parse(self.versions)

    def nullable_in(self, version: int) -> bool:
        """Whether null is a valid value in this version."""
        return version in Versions.parse(self.nullable)

    def tagged_in(self, version: int) -> bool:
        """Whether, in this version, the field travels in the tagged-fields section."""
        return version in Versions.parse(self.tagged)

    def default_factory(self, version: int) -> Callable[[], Any]:
        """A function giving a fresh default value (fresh so callers may mutate lists/dicts)."""
        if self.default is not _NO_DEFAULT:
            value = self.default
            if isinstance(value, (list, dict)):
                return lambda: value.copy()
            return lambda: value
        if self.is_array:
            return list
        if self.is_struct_like:
            subfields = [f for f in self.fields if f.exists_in(version)]
            factories = [(f.key, f.default_factory(version)) for f in subfields]
            return lambda: {key: make() for key, make in factories}
        primitive_default = self.primitive.default
        return lambda: primitive_default


@dataclass(frozen=True, eq=False)
class Api:
    """One Kafka API: its key, the versions we support, the flexible versions, both messages."""

    key: int
    name: str
    versions: str
    flexible: str
    request: tuple[Field, ...]
    response: tuple[Field, ...]

    @property
    def version_range(self) -> Versions:
        """The supported versions as a range."""
        return Versions.parse(self.versions)

    def is_flexible(self, version: int) -> bool:
        """Whether this version uses compact types, tagged fields and the flexible headers."""
        return version in Versions.parse(self.flexible)
