"""WarningLimiter: one line per source and kind per interval, what was held back counted in the next line or by
flush, every warning counted by kind."""

from __future__ import annotations

import logging

from pipeline.warning_limiter import WarningLimiter


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_source_and_kind_per_interval(caplog):
    clock = FakeClock()
    limiter = WarningLimiter(logging.getLogger("test.limiter"), interval_s=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.limiter"):
        for _ in range(3):
            limiter.warn("10.0.0.1", "malformed_request", "bad frame from %s", "10.0.0.1:5000")
        limiter.warn("10.0.0.2", "malformed_request", "bad frame from %s", "10.0.0.2:5000")
        limiter.warn("10.0.0.1", "unknown_api", "unknown API from %s", "10.0.0.1:5000")
        clock.now += 10.0
        limiter.warn("10.0.0.1", "malformed_request", "bad frame from %s", "10.0.0.1:5001")
        limiter.warn("10.0.0.2", "malformed_request", "bad frame from %s", "10.0.0.2:5001")
        clock.now += 10.0
        limiter.flush()
    assert caplog.messages == [
        "bad frame from 10.0.0.1:5000", "bad frame from 10.0.0.2:5000", "unknown API from 10.0.0.1:5000",
        "bad frame from 10.0.0.1:5001 (and 2 more malformed_request warning(s) from 10.0.0.1 in the last 10s, "
        "not logged)",
        "bad frame from 10.0.0.2:5001"]
    assert limiter.counts == {"malformed_request": 6, "unknown_api": 1}


def test_flush_logs_what_was_held_back_once_the_interval_ended(caplog):
    clock = FakeClock()
    limiter = WarningLimiter(logging.getLogger("test.limiter"), interval_s=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.limiter"):
        for _ in range(4):
            limiter.warn("producer-1", "NOT_LEADER_OR_FOLLOWER", "retrying")
        limiter.flush()  # the interval has not ended: nothing yet
        clock.now += 12.0
        limiter.flush()
        limiter.flush()
    assert caplog.messages == ["retrying", "3 more NOT_LEADER_OR_FOLLOWER warning(s) from producer-1 in 12s, not logged"]
