"""Client-supplied text made fit for one log line.

Group ids, member ids, client ids and protocol names reach the broker as any string a client likes: written raw
into a log line, a newline in one forges a line of the client's making, and a terminal escape or a right-to-left
override disguises what the line says. :func:`printable` escapes them the way ``repr`` does, without the quotes.
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: object) -> str:
    """``str(text)`` with every character ``str.isprintable`` refuses (control characters, line and paragraph
    separators, format characters such as U+202E) and the backslash escaped as ``repr`` writes them (``\\n``,
    ``\\x1b``, ``\\u202e``, ``\\\\``); printable text comes back unchanged."""
    text = str(text)
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in text)
