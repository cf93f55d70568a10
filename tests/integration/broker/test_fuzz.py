"""Fuzzing the broker with mutated requests of every advertised API and version (tests/support/request_fuzzer.py)
for about 40 seconds over many short connections, each ended by a reset: the broker stays up, answers or closes
each one, logs no traceback (a malformed request is refused in one line, never an internal error), keeps its
memory, and serves a normal client throughout and afterwards. bench/broker_fuzz_bench.py runs the same for hours.

The seed changes every run (printed on failure; FUZZ_SEED=<n> replays one), so the suite covers new ground
each time."""

from __future__ import annotations

import os
import random

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.request_fuzzer import distinct_tracebacks, fuzz, normal_client_served

FUZZ_SECONDS = 40
MiB = 1024 * 1024


def test_mutated_requests_never_bring_the_broker_down(broker_factory):
    seed = int(os.environ.get("FUZZ_SEED") or random.randrange(1 << 32))
    broker: BrokerProcess = broker_factory(overrides={
        "socket.request.read.timeout.ms": 500, "group.initial.rebalance.delay.ms": 100, "num.partitions": 2})
    create_topic(broker.bootstrap, "events", 2)
    rss_before = broker.rss_bytes()
    report = fuzz(broker.host, broker.port, FUZZ_SECONDS, seed)
    context = f"seed {seed}: {report.summary()}"
    assert broker.is_running, f"{context}\n{broker.log_tail()}"
    assert not report.failed_checks, f"{context}: a normal client was not served: {report.failed_checks[:3]}"
    assert normal_client_served(broker.host, broker.port) is None, context
    assert report.connections["answered"] > 0 and report.connections["closed"] > 0, context
    tracebacks = distinct_tracebacks(broker.log_text())
    assert not tracebacks, f"{context}: the broker logged tracebacks:\n" + "\n".join(
        f"{count} x {key}" for key, count in tracebacks.items())
    growth = broker.rss_bytes() - rss_before
    assert growth < 100 * MiB, f"{context}: RSS grew {growth / MiB:.0f} MiB"
