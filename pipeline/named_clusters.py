"""Lists of named clusters in one setting, ``NAME=HOST:PORT[,HOST:PORT...][/CHROOT][,NAME=...]``: the mirror's
sources (by ZooKeeper or by brokers) and the datacenters the audit reads."""

from __future__ import annotations

import re

__all__ = ["parse_sources"]

_NAME = re.compile(r"[A-Za-z0-9._-]+")


def parse_sources(text: str) -> dict[str, str]:
    """``name=HOST:PORT[,HOST:PORT...][/CHROOT][,name=...]`` -> {name: connect string or broker list}; either
    may hold commas (several servers), so a new source starts only where ``NAME=`` does."""
    sources: dict[str, str] = {}
    name: str | None = None
    for part in (p.strip() for p in text.split(",")):
        head, sep, rest = part.partition("=")
        if sep and _NAME.fullmatch(head):
            if head in sources:
                raise ValueError(f"source {head!r} given twice")
            name = head
            sources[name] = rest.strip()
        elif name is not None and part:
            sources[name] += "," + part
        elif part:
            raise ValueError(f"expected NAME=HOST:PORT[/CHROOT], got {part!r}")
    for source, connect in sources.items():
        if not connect:
            raise ValueError(f"source {source!r} has no servers")
    return sources
