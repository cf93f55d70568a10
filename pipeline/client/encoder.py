"""Encoders: how the producer turns a message object (or a key) into the bytes stored in a record.

``serializer.class`` (messages) and ``key.serializer.class`` (keys) name an :class:`Encoder`, either as an
instance or as a dotted path ``package.module.ClassName`` that is imported and instantiated with no arguments.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, Sequence

__all__ = ["Encoder", "DefaultEncoder", "StringEncoder", "load_instance"]

_BYTES_TYPES = (bytes, bytearray, memoryview)


class Encoder(ABC):
    """Turns one message into bytes; ``None`` (a null value or key) must stay ``None``."""

    @abstractmethod
    def encode(self, message: Any) -> bytes | None:
        """The bytes stored for ``message``."""

    def encode_all(self, messages: Sequence[Any]) -> list:
        """Encode a list of messages (subclasses may do it faster than one call each)."""
        return list(map(self.encode, messages))

    def encode_for(self, topic: str, messages: Sequence[Any]) -> list:
        """Encode messages bound for ``topic``: what the producer calls. Encoders whose bytes depend on the
        topic (a schema registry subject named after it, as Kafka's ``Serializer.serialize(topic, data)``)
        override this; the others encode the same whatever the topic."""
        return self.encode_all(messages)


class DefaultEncoder(Encoder):
    """Passes bytes through unchanged (bytearray and memoryview become bytes); anything else is an error."""

    def encode(self, message: Any) -> bytes | None:
        if message is None or type(message) is bytes:
            return message
        if isinstance(message, _BYTES_TYPES):
            return bytes(message)
        raise TypeError(f"DefaultEncoder takes bytes, got {type(message).__name__}; "
                        "configure serializer.class (e.g. pipeline.client.encoder.StringEncoder)")

    def encode_all(self, messages: Sequence[Any]) -> list:
        # The common case, a list of bytes, is returned as it is.
        if type(messages) is list:
            for message in messages:
                if type(message) is not bytes:
                    break
            else:
                return messages
        return list(map(self.encode, messages))


class StringEncoder(Encoder):
    """Encodes str as UTF-8 (bytes pass through), like Kafka's StringEncoder / StringSerializer."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def encode(self, message: Any) -> bytes | None:
        if message is None or type(message) is bytes:
            return message
        if isinstance(message, str):
            return message.encode(self.encoding)
        if isinstance(message, _BYTES_TYPES):
            return bytes(message)
        raise TypeError(f"StringEncoder takes str, got {type(message).__name__}")


def load_instance(spec: Any, base: type, what: str) -> Any:
    """``spec`` itself if it is an instance of ``base``; else import the dotted path (or use the class) and instantiate it."""
    if isinstance(spec, base):
        return spec
    if isinstance(spec, type):
        cls = spec
    elif isinstance(spec, str):
        module_name, _, class_name = spec.strip().rpartition(".")
        if not module_name:
            raise ValueError(f"{what} {spec!r} is not a dotted path package.module.Class")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{what} {spec!r} cannot be loaded: {exc}") from None
    else:
        raise ValueError(f"{what} must be a dotted class path or an instance of {base.__name__}, got {spec!r}")
    instance = cls()
    if not isinstance(instance, base) and not callable(getattr(instance, "encode" if base is Encoder else "partition", None)):
        raise ValueError(f"{what} {spec!r} is not a {base.__name__}")
    return instance
