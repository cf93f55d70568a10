"""The log cleaner's fault injection, for tests only, through declared broker settings: make a cleaning pass stop
dead at a named point.

With ``log.cleaner.fault.pause.at=<point>`` a pass that reaches ``<point>`` writes "<pid> <point>" to the file
``log.cleaner.fault.pause.file`` names and then waits forever, for the test to SIGKILL the broker exactly there.
The settings travel to the cleaner's worker process in its CleanerConfig. The points, in the order a pass meets
them:

    writing-cleaned  part of a .cleaned segment is written              (in the cleaner worker)
    before-swap      the .cleaned segment is complete and synced, not yet renamed .swap   (in the worker)
    during-swap      the .swap files are in place and the first replaced segment renamed .deleted (in the broker)

Without the setting (every real run) :meth:`CleanerFaults.pause` does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.pause_points import pause_here

__all__ = ["CleanerFaults", "PAUSE_POINTS"]

PAUSE_POINTS = ("writing-cleaned", "before-swap", "during-swap")


@dataclass(frozen=True)
class CleanerFaults:
    """The pause asked for (log.cleaner.fault.pause.at and .file); plain values, sent to the worker process."""

    pause_at: str = ""
    pause_file: str = ""

    def pause(self, point: str) -> None:
        """Wait forever here if asked to pause at ``point``."""
        pause_here(point, self.pause_at, self.pause_file)
