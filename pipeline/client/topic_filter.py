"""Topic filters of the high-level consumer: a Whitelist or Blacklist regular expression over topic names.

As in Kafka, the expression must match the whole topic name, a comma is read as "or" (``a,b`` is ``a|b``),
and internal topics (names starting with ``__``) are left out unless asked for.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

__all__ = ["TopicFilter", "Whitelist", "Blacklist", "topic_filter_from_registration", "whitelist_except"]


class TopicFilter(ABC):
    """A regular expression over topic names; subclasses decide whether a match includes or excludes."""

    #: The ``pattern`` a consumer registers in ZooKeeper for this kind of filter.
    pattern = ""

    def __init__(self, regex: str) -> None:
        text = regex.strip().replace(" ", "")
        if not text:
            raise ValueError("a topic filter needs a regular expression")
        self.regex = text.replace(",", "|")
        try:
            self._compiled = re.compile(self.regex)
        except re.error as exc:
            raise ValueError(f"topic filter {regex!r} is not a regular expression: {exc}") from None

    def matches(self, topic: str) -> bool:
        return self._compiled.fullmatch(topic) is not None

    @abstractmethod
    def is_topic_allowed(self, topic: str, exclude_internal: bool = True) -> bool:
        """Whether the filter takes ``topic``."""

    def select(self, topics: list[str], exclude_internal: bool = True) -> list[str]:
        """The allowed topics of ``topics``, sorted."""
        return sorted(t for t in topics if self.is_topic_allowed(t, exclude_internal))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.regex == self.regex  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.regex))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"


def _internal(topic: str) -> bool:
    return topic.startswith("__")


class Whitelist(TopicFilter):
    """Topics whose whole name matches the expression."""

    pattern = "white_list"

    def is_topic_allowed(self, topic: str, exclude_internal: bool = True) -> bool:
        return self.matches(topic) and not (exclude_internal and _internal(topic))


class Blacklist(TopicFilter):
    """Topics whose name does not match the expression."""

    pattern = "black_list"

    def is_topic_allowed(self, topic: str, exclude_internal: bool = True) -> bool:
        return not self.matches(topic) and not (exclude_internal and _internal(topic))


def whitelist_except(whitelist: str, blacklist: str | None) -> Whitelist:
    """One filter of the topics ``whitelist`` matches and ``blacklist`` does not (whole names), as the mirror and
    the ETL choose their topics."""
    white = Whitelist(whitelist).regex
    if not blacklist:
        return Whitelist(white)
    return Whitelist(f"(?!(?:{Whitelist(blacklist).regex})$)(?:{white})")


def topic_filter_from_registration(pattern: str, regex: str) -> TopicFilter:
    """The filter another consumer registered as ``pattern`` (white_list or black_list) and ``regex``."""
    if pattern == Whitelist.pattern:
        return Whitelist(regex)
    if pattern == Blacklist.pattern:
        return Blacklist(regex)
    raise ValueError(f"unknown topic filter pattern {pattern!r}")
