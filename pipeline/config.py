"""Configuration tables: properties declared once as data (name, parser, default, doc), read from dicts or files.

The broker, the producer and the consumers each declare a table of :class:`Property` rows with Kafka's
property names; :class:`Config` validates a user's dict (or a properties file) against it, rejects unknown
names with a clear error, resolves aliases (older property names of the paper's era), and lets code read
values by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A property that is unknown, malformed or out of range."""


@dataclass(frozen=True)
class Property:
    """One property: its Kafka name, how to parse it from text, its default, what it does, other names,
    and for a number the range Kafka accepts (``at_least`` .. ``at_most``, inclusive; None: unbounded)."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    aliases: tuple[str, ...] = ()
    at_least: int | None = None
    at_most: int | None = None


def check_range(kind: str, name: str, value: int | None, at_least: int | None, at_most: int | None) -> None:
    """Raise ConfigError unless ``value`` (None: unset) lies within [at_least, at_most]."""
    if value is None:
        return
    if at_least is not None and value < at_least:
        raise ConfigError(f"{kind} {name}={value} is below its minimum {at_least}")
    if at_most is not None and value > at_most:
        raise ConfigError(f"{kind} {name}={value} is above its maximum {at_most}")


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_optional_int(text: str) -> int | None:
    text = text.strip()
    return None if text == "" else int(text)


def parse_str(text: str) -> str:
    return text.strip()


def parse_int(text: str) -> int:
    return int(text.strip())


def parse_float(text: str) -> float:
    return float(text.strip())


def parse_regex(text: str) -> str:
    """A regular expression, checked to compile."""
    text = text.strip()
    re.compile(text)
    return text


def parse_choice(*choices: str) -> Callable[[str], str]:
    """A parser accepting one of ``choices`` (case-insensitive)."""

    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def read_properties_file(path: str | Path) -> dict[str, str]:
    """Parse a Java-style properties file (key=value or key: value, # and ! comments)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        values[line[:sep].strip()] = line[sep + 1 :].strip()
    return values


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """Turn ``key=value`` strings from a command line into a dict."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r} is not of the form key=value")
        values[key.strip()] = value
    return values


def command_line_values(config_file: str | Path | None, overrides: Iterable[str],
                        options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a command line: a properties file, then ``KEY=VALUE`` overrides, then the options given
    (``{property name: value}``, None for an option left out), each later one winning."""
    values: dict[str, Any] = dict(read_properties_file(config_file)) if config_file else {}
    values.update(parse_overrides(overrides))
    values.update((name, value) for name, value in options.items() if value is not None)
    return values


class Config:
    """Validated values for one table of properties, indexed by Kafka property name.

    Values may be given as text (from files or command lines) or already typed (from Python dicts:
    ``{"batch.size": 50}``); typed values that are not strings are taken as they are.
    """

    kind = "property"

    def __init__(self, table: Iterable[Property], values: Mapping[str, Any] | str | Path | None = None) -> None:
        self._table = {p.name: p for p in table}
        names = dict(self._table)
        for prop in self._table.values():
            for alias in prop.aliases:
                names[alias] = prop
        if isinstance(values, (str, Path)):
            values = read_properties_file(values)
        self._values: dict[str, Any] = {name: p.default for name, p in self._table.items()}
        given: dict[str, str] = {}
        for name, value in (values or {}).items():
            prop = names.get(name)
            if prop is None:
                raise ConfigError(f"unknown {self.kind} {name!r}")
            if prop.name in given and given[prop.name] != name:
                raise ConfigError(f"{name!r} and {given[prop.name]!r} set the same {self.kind}; give only one")
            given[prop.name] = name
            if isinstance(value, str):
                try:
                    value = prop.parse(value)
                except ValueError as exc:
                    raise ConfigError(f"{self.kind} {name}={value!r}: {exc}") from None
            self._values[prop.name] = value
        for prop in self._table.values():
            check_range(self.kind, prop.name, self._values[prop.name], prop.at_least, prop.at_most)
        self.given = frozenset(given)  # the properties set explicitly (by their own name or an alias)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def require_positive(self, *names: str) -> None:
        for name in names:
            value = self._values[name]
            if value is None or value <= 0:
                raise ConfigError(f"{self.kind} {name} must be positive, got {value}")

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


def help_table(table: Iterable[Property]) -> str:
    """A table as aligned text, for ``--help-config`` options."""
    rows = list(table)
    width = max(len(p.name) for p in rows)
    return "\n".join(f"{p.name:<{width}}  default {p.default!s:<12} {p.doc}{_range_text(p)}" for p in rows)


def _range_text(prop: Property) -> str:
    if prop.at_least is None and prop.at_most is None:
        return ""
    low = "" if prop.at_least is None else prop.at_least
    high = "" if prop.at_most is None else prop.at_most
    return f" [{low}..{high}]"
