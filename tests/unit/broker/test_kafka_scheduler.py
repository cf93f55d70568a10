"""KafkaScheduler: periodic tasks on named pool threads, a failing run keeps its schedule, a slow run is
not started twice at once, shutdown stops the schedule and waits for what runs."""

from __future__ import annotations

import threading

from broker.kafka_scheduler import KafkaScheduler
from tests.support.polling import wait_until


def test_periodic_tasks_run_repeatedly_on_named_threads_and_survive_failures():
    scheduler = KafkaScheduler(2, thread_name_prefix="test-scheduler")
    runs: list[str] = []

    def flaky() -> None:
        runs.append(threading.current_thread().name)
        if len(runs) == 1:
            raise RuntimeError("first run fails")

    try:
        scheduler.schedule("flaky", flaky, period_ms=10, delay_ms=0)
        wait_until(lambda: len(runs) >= 3, timeout=5, message="three runs")
    finally:
        scheduler.shutdown()
    assert all(name.startswith("test-scheduler") for name in runs)


def test_a_slow_run_is_not_started_again_while_it_runs():
    scheduler = KafkaScheduler(4)
    release = threading.Event()
    slow_runs = []
    ticks = []

    def slow() -> None:
        slow_runs.append(1)
        release.wait(5)

    try:
        scheduler.schedule("slow", slow, period_ms=5, delay_ms=0)
        scheduler.schedule("ticker", lambda: ticks.append(1), period_ms=5, delay_ms=0)
        wait_until(lambda: len(ticks) >= 10, timeout=5, message="ten periods")
        assert len(slow_runs) == 1
        release.set()
        wait_until(lambda: len(slow_runs) >= 2, timeout=5, message="the next run once the first ended")
    finally:
        release.set()
        scheduler.shutdown()


def test_shutdown_waits_for_submitted_work():
    scheduler = KafkaScheduler(1)
    done = threading.Event()
    scheduler.submit(done.wait, 0)
    finished = scheduler.submit(lambda: "finished")
    scheduler.shutdown()
    assert finished.result(0) == "finished"
