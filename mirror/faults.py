"""The mirror's fault injection, for tests and drills, through a declared setting.

With ``fault.drop.event.ids=<id>,<id>...`` the mirror loses the events with those ``header.eventId`` values: it
takes them as acknowledged without sending them, so their source offsets are committed and the target never gets
them -- the silent loss mirrors are known for, for the audit to name at the mirror tier. Without it (every real
run) ``dropped_event_ids`` is empty.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["dropped_event_ids"]


def dropped_event_ids(config: Mapping[str, Any]) -> frozenset[str]:
    """The event ids the mirror is asked to lose (empty unless fault.drop.event.ids is set)."""
    return frozenset(i.strip() for i in config["fault.drop.event.ids"].split(",") if i.strip())
