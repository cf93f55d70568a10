"""The ETL's fault injection, for tests and drills, through declared settings (etl.config's ``fault.*``): make a
run stop dead at a named point, or lose events.

With ``fault.pause.at=<point>`` a run (driver or task) that reaches ``<point>`` writes the file named by
``fault.pause.file`` and then waits forever, for the test to SIGKILL the driver exactly there. The points, in the
order a run meets them:

    loading      a task has loaded its first batch (Spark tasks are running)
    publishing   the journal is written and the first staged file moved into a table
    published    the manifest is written, the ZooKeeper commit not begun
    committing   the first partition's offset is written to ZooKeeper, the others not

With ``fault.drop.event.ids=<id>,<id>...`` the tasks lose the events with those ``header.eventId`` values: not
written, not counted, their offsets committed with the rest -- an ETL bug, for the audit to name at the warehouse
tier. The driver takes the settings with :func:`configure` at the start of a run, and each task from its
TaskContext; without them (every real run) ``pause_at`` does nothing and ``dropped_event_ids`` is empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pipeline.pause_points import pause_here

__all__ = ["Faults", "PAUSE_POINTS", "configure", "dropped_event_ids", "pause_at"]

PAUSE_POINTS = ("loading", "publishing", "published", "committing")


@dataclass(frozen=True)
class Faults:
    """The faults asked for (plain values: they travel to Spark's Python workers in the TaskContext)."""

    pause_at: str = ""
    pause_file: str = ""
    drop_event_ids: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> "Faults":
        """The faults ``config`` (an EtlConfig) asks for."""
        ids = frozenset(i.strip() for i in config["fault.drop.event.ids"].split(",") if i.strip())
        return cls(config["fault.pause.at"], config["fault.pause.file"], ids)


_active = Faults()


def configure(faults: Faults) -> None:
    """Inject ``faults`` into this process's runs and tasks from now on."""
    global _active
    _active = faults


def pause_at(point: str) -> None:
    """Wait forever here if the faults ask to pause at ``point``."""
    pause_here(point, _active.pause_at, _active.pause_file)


def dropped_event_ids() -> frozenset[str]:
    """The event ids a run is asked to lose (empty unless fault.drop.event.ids is set)."""
    return _active.drop_event_ids
