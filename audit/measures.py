"""What the audit counts per window, by measure: a tier's own count (``producer``, ``datacenter``, ...), the events
the producer tier created but could not deliver (``producer/failed``), those it still had in flight when it
published (``producer/unsettled``: its records add up to the events in flight now), and the records a tier set
aside, per reason (``mirror/quarantined/<reason>``, with ids; ``mirror/quarantined-without-id/<reason>``, counted
only).

A measure is the first element of the audit's count keys (:mod:`audit.state`), so the checkpointed counts need no
other shape; :func:`parse_measure` reads one back.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FAILED", "Measure", "QUARANTINED", "QUARANTINED_WITHOUT_ID", "UNSETTLED", "failed_measure",
           "parse_measure", "quarantine_measure", "unsettled_measure"]

FAILED = "failed"
UNSETTLED = "unsettled"
QUARANTINED = "quarantined"
QUARANTINED_WITHOUT_ID = "quarantined-without-id"
_SEPARATOR = "/"


class Measure(NamedTuple):
    """A measure read back: its tier, its kind ("" for the tier's own count) and the quarantine reason ("")."""

    tier: str
    kind: str = ""
    reason: str = ""


def failed_measure(tier: str) -> str:
    """The events ``tier`` (the producer tier) created and could not deliver, for good."""
    return f"{tier}{_SEPARATOR}{FAILED}"


def unsettled_measure(tier: str) -> str:
    """The events ``tier`` (the producer tier) still had in flight, summed over its records of a window."""
    return f"{tier}{_SEPARATOR}{UNSETTLED}"


def quarantine_measure(tier: str, reason: str, with_id: bool = True) -> str:
    """The records ``tier`` set aside for ``reason``: those with an event id, or (``with_id`` False) without."""
    return _SEPARATOR.join((tier, QUARANTINED if with_id else QUARANTINED_WITHOUT_ID, reason))


def parse_measure(measure: str) -> Measure:
    """The tier, kind and reason of ``measure`` (a reason may hold the separator: it is the rest)."""
    tier, _, rest = measure.partition(_SEPARATOR)
    kind, _, reason = rest.partition(_SEPARATOR)
    return Measure(tier, kind, reason)
