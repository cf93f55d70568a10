"""The ETL's fault injection, for tests and drills: make a run stop dead at a named point, or lose events.

With ``ETL_PAUSE_AT=<point>`` in its environment a run (driver or task) that reaches ``<point>`` writes the
file named by ``ETL_PAUSE_FILE`` and then waits forever, for the test to SIGKILL the driver exactly there.
The points, in the order a run meets them:

    loading      a task has loaded its first batch (Spark tasks are running)
    publishing   the journal is written and the first staged file moved into a table
    published    the manifest is written, the ZooKeeper commit not begun
    committing   the first partition's offset is written to ZooKeeper, the others not

Without ``ETL_PAUSE_AT`` (every real run) ``pause_at`` does nothing.

With ``ETL_DROP_EVENT_IDS=<id>,<id>...`` the tasks lose the events with those ``header.eventId`` values: not
written, not counted, their offsets committed with the rest -- an ETL bug, for the audit to name at the warehouse
tier. Without it (every real run) ``dropped_event_ids`` is empty.
"""

from __future__ import annotations

import os

from pipeline.pause_points import pause_if_asked

__all__ = ["PAUSE_POINTS", "dropped_event_ids", "pause_at"]

PAUSE_POINTS = ("loading", "publishing", "published", "committing")


def pause_at(point: str) -> None:
    """Wait forever here if the environment asks to pause at ``point``."""
    pause_if_asked(point, "ETL_PAUSE_AT", "ETL_PAUSE_FILE")


def dropped_event_ids() -> frozenset[str]:
    """The event ids a run is asked to lose (empty unless ETL_DROP_EVENT_IDS is set)."""
    return frozenset(i.strip() for i in os.environ.get("ETL_DROP_EVENT_IDS", "").split(",") if i.strip())
