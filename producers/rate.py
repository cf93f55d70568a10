"""Rate control for the emulators: how many events are due now to hold a target rate.

The schedule is absolute (the n-th event is due at start + n / rate), so short stalls are caught up and
the rate measured over any long interval stays on target. A backlog beyond `max_backlog_s` worth of
events is not caught up in a burst: it is dropped from the schedule and counted in `skipped`, and the
emulator reports that it cannot keep up.
"""

from __future__ import annotations

__all__ = ["RateController"]


class RateController:
    """Events due at a target rate (events per second), from a monotonic clock in seconds."""

    def __init__(self, rate: float, start: float, *, max_backlog_s: float = 1.0) -> None:
        if rate <= 0:
            raise ValueError(f"the rate must be positive, got {rate}")
        self.rate = rate
        self.start = start
        self.max_backlog = max(1, int(rate * max_backlog_s))
        self.emitted = 0
        self.skipped = 0

    def due(self, now: float) -> int:
        """Events to emit now to be back on schedule (at most the backlog limit)."""
        owed = int((now - self.start) * self.rate) - self.emitted - self.skipped
        if owed > self.max_backlog:
            self.skipped += owed - self.max_backlog
            owed = self.max_backlog
        return max(owed, 0)

    def drop_backlog(self, now: float) -> None:
        """Count the backlog beyond the limit at ``now`` as skipped, as ``due`` does, emitting nothing: at the end of
        a run, where one chunk of events may have taken the rest of it without ``due`` being asked again."""
        self.due(now)

    def emitted_now(self, n: int) -> None:
        self.emitted += n

    def next_due(self) -> float:
        """When the next event is due on the clock of `due`."""
        return self.start + (self.emitted + self.skipped + 1) / self.rate
