"""The mirror's fault injection, for tests and drills.

With ``MIRROR_DROP_EVENT_IDS=<id>,<id>...`` in its environment the mirror loses the events with those
``header.eventId`` values: it takes them as acknowledged without sending them, so their source offsets are
committed and the target never gets them -- the silent loss mirrors are known for, for the audit to name at the
mirror tier. Without it (every real run) ``dropped_event_ids`` is empty.
"""

from __future__ import annotations

import os

__all__ = ["dropped_event_ids"]


def dropped_event_ids() -> frozenset[str]:
    """The event ids the mirror is asked to lose (empty unless MIRROR_DROP_EVENT_IDS is set)."""
    return frozenset(i.strip() for i in os.environ.get("MIRROR_DROP_EVENT_IDS", "").split(",") if i.strip())
