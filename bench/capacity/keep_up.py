"""Whether a tier keeps up over a step, from its lag sampled through the step and the audit's windows.

A consumer that keeps up has a lag that goes up and down (the ETL's rises for a minute and drops at each run, the
mirror's with its batches) but does not grow: the lowest lag of the step's second half is at most the lowest of
its first half plus ``slack_s`` seconds' worth of events. Comparing the lows, not the ends, keeps a step that
happens to end just before an ETL run from being taken for one that falls behind. A lag that never exceeds its
tier's allowance (seconds of events: the ETL's is its schedule's period and a run as long) is bounded whatever its
course within the step: a step shorter than a slow ETL's cycle cannot show its lows.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

__all__ = ["DEFAULT_SLACK_S", "lag_bounded", "lag_growth", "windows_complete"]

DEFAULT_SLACK_S = 5.0


def lag_growth(samples: Sequence[tuple[float, float]]) -> float | None:
    """How much the lag's low rose from the first half of the samples (time, lag) to the second (None: fewer
    than two samples)."""
    if len(samples) < 2:
        return None
    ordered = sorted(samples)
    middle = (ordered[0][0] + ordered[-1][0]) / 2
    first = [lag for t, lag in ordered if t <= middle]
    second = [lag for t, lag in ordered if t > middle] or [ordered[-1][1]]
    return min(second) - min(first)


def lag_bounded(samples: Sequence[tuple[float, float]], rate: float, slack_s: float = DEFAULT_SLACK_S,
                allowance_s: float = 0.0) -> bool | None:
    """Whether the lag stayed bounded at ``rate`` events per second: within ``allowance_s`` seconds of events
    throughout, or its low grown by at most ``slack_s`` of them (None: not enough samples to tell)."""
    growth = lag_growth(samples)
    if growth is None:
        return None
    return max(lag for _, lag in samples) <= rate * allowance_s or growth <= max(rate * slack_s, 1.0)


def windows_complete(states: Iterable[Mapping[str, str]], tiers: Iterable[str]) -> bool | None:
    """Whether every window (its state per tier) is complete at every one of ``tiers``: False once one is not
    (lost, short, duplicated, ...), None while one is still pending at one of them or when there is no window."""
    tiers = tuple(tiers)
    found = [window.get(tier, "pending") for window in states for tier in tiers]
    if any(state not in ("complete", "pending") for state in found):
        return False
    return None if not found or "pending" in found else True
