"""Fault injection for tests and drills, through declared ``testing.*`` settings read in this one place.

A service adds :func:`fault_properties` to its settings table (the rows are documented there as test-only),
reads them once with :meth:`Faults.of` and passes the frozen :class:`Faults` down to the code that injects them;
no service reads an environment variable for them. Every real run leaves them empty, and then they do nothing.

- ``testing.pause.at=<point>`` and ``testing.pause.file=<file>``: the process stops dead at a named point, after
  writing "<pid> <point>" to the file, and waits forever there, for the test to SIGKILL it exactly at that point
  (the ETL's run and the broker's log cleaner name their points).
- ``testing.drop.event.ids=<id>,<id>...``: the service loses the events with those ``header.eventId`` values (the
  mirror takes them as acknowledged without sending them; the ETL neither writes nor counts them), for the audit
  to name at that tier.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pipeline.config import Property, parse_choice, parse_str

__all__ = ["DROP_EVENT_IDS", "Faults", "PAUSE_AT", "PAUSE_FILE", "pause_here", "fault_properties"]

PAUSE_AT = "testing.pause.at"
PAUSE_FILE = "testing.pause.file"
DROP_EVENT_IDS = "testing.drop.event.ids"


def fault_properties(pause_points: Sequence[str] = (), *, drops_events: bool = False) -> tuple[Property, ...]:
    """The test-only rows of a service's table: the pause (when it names ``pause_points``) and the dropping of
    events (when ``drops_events``)."""
    rows: list[Property] = []
    if pause_points:
        rows += [Property(PAUSE_AT, parse_choice("", *pause_points), "",
                          "TEST ONLY: stop dead at this point (" + ", ".join(pause_points) + f"), after writing "
                          f"{PAUSE_FILE}, for a test to kill the process exactly there (empty: never)"),
                 Property(PAUSE_FILE, parse_str, "", f"TEST ONLY: the marker file written before pausing at {PAUSE_AT}")]
    if drops_events:
        rows.append(Property(DROP_EVENT_IDS, parse_str, "",
                             "TEST ONLY: lose the events with these header.eventId values (comma-separated), for the "
                             "audit to name (empty: none)"))
    return tuple(rows)


def pause_here(point: str, pause_at: str, marker: str) -> None:
    """Wait forever if ``pause_at`` names ``point``, after writing the marker file ``marker`` (when given)."""
    if pause_at != point:
        return
    if marker:
        with open(marker, "w") as out:
            out.write(f"{os.getpid()} {point}\n")
    while True:
        time.sleep(3600)


@dataclass(frozen=True)
class Faults:
    """The faults asked for; plain values, so they travel to worker processes (Spark's, the log cleaner's)."""

    pause_at: str = ""
    pause_file: str = ""
    drop_event_ids: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: Mapping[str, Any] | Any) -> "Faults":
        """The faults a service's settings ask for (a row it did not declare counts as unset)."""
        ids = str(config.get(DROP_EVENT_IDS) or "")
        return cls(str(config.get(PAUSE_AT) or ""), str(config.get(PAUSE_FILE) or ""),
                   frozenset(i.strip() for i in ids.split(",") if i.strip()))

    def pause(self, point: str) -> None:
        """Wait forever here if asked to pause at ``point``."""
        if self.pause_at == point:
            pause_here(point, self.pause_at, self.pause_file)
