"""Small helpers that render Markdown tables and values the same way on every machine."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

__all__ = ["cell", "code", "table"]


def cell(text: str) -> str:
    """``text`` made safe for one cell of a Markdown table (pipes escaped, on one line)."""
    return " ".join(text.split()).replace("|", "\\|")


def code(value: Any) -> str:
    """``value`` as inline code (a collection comma-separated, a set sorted); None as *unset*."""
    if value is None:
        return "*unset*"
    if isinstance(value, bool):
        value = "true" if value else "false"
    if isinstance(value, (frozenset, set)):
        value = sorted(value, key=str)
    text = ", ".join(str(v) for v in value) if isinstance(value, (tuple, list)) else str(value)
    if text == "":
        return '`""`'
    return f"`{text}`"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; every cell is escaped with :func:`cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
