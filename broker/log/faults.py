"""The log cleaner's fault injection, for tests: make a cleaning pass stop dead at a named point.

With ``KAFKA_CLEANER_PAUSE_AT=<point>`` in the broker's environment, a cleaner thread that reaches
``<point>`` writes "<pid> <point>" to the file named by ``KAFKA_CLEANER_PAUSE_FILE`` and then waits
forever, for the test to SIGKILL the broker exactly there. The points, in the order a pass meets them:

    writing-cleaned  part of a .cleaned segment is written
    before-swap      the .cleaned segment is complete and synced, not yet renamed .swap
    during-swap      the .swap files are in place and the first replaced segment renamed .deleted

Without ``KAFKA_CLEANER_PAUSE_AT`` (every real run) ``pause_at`` does nothing.
"""

from __future__ import annotations

from pipeline.pause_points import pause_if_asked

__all__ = ["PAUSE_POINTS", "pause_at"]

PAUSE_POINTS = ("writing-cleaned", "before-swap", "during-swap")


def pause_at(point: str) -> None:
    """Wait forever here if the environment asks to pause at ``point``."""
    pause_if_asked(point, "KAFKA_CLEANER_PAUSE_AT", "KAFKA_CLEANER_PAUSE_FILE")
