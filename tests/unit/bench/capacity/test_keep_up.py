"""The keep-up decision: a lag that goes up and down but whose low does not grow is bounded (the ETL's sawtooth),
one that grows by more than the slack is not; windows complete only when complete at every tier asked."""

from __future__ import annotations

import importlib

keep_up = importlib.import_module("bench.capacity.keep_up")


def test_a_steady_lag_is_bounded():
    assert keep_up.lag_bounded([(t, 500.0) for t in range(0, 150, 15)], rate=1000)


def test_the_etl_sawtooth_is_bounded_even_when_the_step_ends_high():
    # rises 60 s of events between runs, drops to ~0 at each run; the last sample is just before a run
    samples = [(t, (t % 60) * 1000.0) for t in range(0, 180, 15)]
    assert samples[-1][1] == 45000.0
    assert keep_up.lag_bounded(samples, rate=1000)


def test_a_growing_lag_is_not_bounded():
    samples = [(t, t * 2000.0) for t in range(0, 150, 15)]
    assert keep_up.lag_growth(samples) == samples[5][1] - 0
    assert keep_up.lag_bounded(samples, rate=10000, slack_s=5) is False


def test_growth_within_the_slack_is_bounded():
    samples = [(0, 100.0), (60, 100.0), (90, 4000.0), (120, 4000.0)]
    assert keep_up.lag_bounded(samples, rate=1000, slack_s=5)
    assert keep_up.lag_bounded(samples, rate=100, slack_s=5) is False


def test_a_lag_within_its_allowance_is_bounded_even_while_it_rises():
    # a slow ETL: one run in the step, the lag rising for the rest of it
    samples = [(0, 20000.0), (15, 3000.0), (30, 6000.0), (45, 9000.0), (60, 12000.0), (75, 15000.0)]
    assert keep_up.lag_bounded(samples, rate=200, slack_s=5) is False
    assert keep_up.lag_bounded(samples, rate=200, slack_s=5, allowance_s=100) is True
    assert keep_up.lag_bounded(samples, rate=200, slack_s=5, allowance_s=99) is False


def test_too_few_samples_tell_nothing():
    assert keep_up.lag_bounded([], rate=10) is None
    assert keep_up.lag_bounded([(0, 5.0)], rate=10) is None


def test_samples_out_of_order_are_ordered_by_time():
    assert keep_up.lag_growth([(30, 900.0), (0, 0.0), (20, 800.0), (10, 0.0)]) == 800.0


def test_windows_complete():
    complete = {"producer": "complete", "mirror": "complete", "warehouse": "complete"}
    assert keep_up.windows_complete([complete, complete], ["mirror", "warehouse"]) is True
    assert keep_up.windows_complete([complete, {**complete, "warehouse": "pending"}], ["warehouse"]) is None
    assert keep_up.windows_complete([complete, {**complete, "warehouse": "pending"}], ["mirror"]) is True
    assert keep_up.windows_complete([{**complete, "warehouse": "pending"}, {**complete, "mirror": "lost"}],
                                    iter(["warehouse", "mirror"])) is False
    assert keep_up.windows_complete([{"producer": "complete"}], ["warehouse"]) is None
    assert keep_up.windows_complete([], ["mirror"]) is None
