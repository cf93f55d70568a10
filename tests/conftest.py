"""Pytest setup for the whole suite: markers, warnings made errors, the slow modules first, a backstop for hangs (the
repo root is on the path via pyproject.toml). Fixtures live in the conftest of the lowest directory that covers their users:
tests/integration/conftest.py (processes), tests/unit/conftest.py, tests/unit/broker/log/conftest.py."""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

#: JVM options for the Spark drivers the tests start (PySpark's gateway and spark-submit read SPARK_SUBMIT_OPTS;
#: children inherit it, the deployment's ETL under supervisord too). Runs of a few seconds on 2 cores spend much
#: of their time in the JVM itself: C2 compiler threads and the parallel collector's threads compete with the
#: job, so the client compiler alone and the serial collector start and load about a third faster (measured:
#: a local[2] session plus a small Parquet write, 17-20 s -> 11.5-12 s). The tests' semantics are the same.
SPARK_TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: How long past its pytest-timeout a test may still run before the backstop ends its process (ini hang_grace_s).
HANG_GRACE_S = 120.0
_STDERR_FD: int | None = None
_HANG_DEADLINE: float | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("hang_grace_s", "seconds past its timeout before a still running test's process is ended "
                  f"(default {HANG_GRACE_S:.0f})", default=str(HANG_GRACE_S))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds (large data volumes, Spark, a whole "
                                       "pipeline); its module runs before the others (slow(first=True): before the other slow ones)")
    config.addinivalue_line("markers", "integration: starts real processes on loopback ports")
    # kafka-python 3.x loads its protocol schemas with the legacy importlib.resources API.
    config.addinivalue_line("filterwarnings", r"ignore:(read_text|open_text) is deprecated:DeprecationWarning")
    # A coroutine never awaited is a request or a task silently dropped (issue 26): a failure, suite-wide. The
    # warning is raised in the coroutine's finalizer, so pytest reports it as an unraisable exception.
    config.addinivalue_line("filterwarnings", r"error:coroutine .* was never awaited:RuntimeWarning")
    config.addinivalue_line("filterwarnings",
                            r"error:Exception ignored in. <coroutine:pytest.PytestUnraisableExceptionWarning")
    os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_TEST_JVM_OPTIONS)
    global _STDERR_FD
    if _STDERR_FD is None:
        # The real stderr, kept before any test's output capture takes the descriptor over.
        _STDERR_FD = os.dup(sys.__stderr__.fileno())


def _timeout_s(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout", 0)
    else:
        value = item.config.getini("timeout") or 0
    return float(value or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A backstop under pytest-timeout. Its SIGALRM cannot break every hang (one in C code that never returns to
    the interpreter, or one in the teardown that runs after the timeout fired), and a hung worker stalls the run
    until CI's own limit, naming nothing. A test still running HANG_GRACE_S after its timeout has every thread's
    stack written to stderr and its process ended, from faulthandler's own thread: xdist reports the test as
    crashed and goes on with a new worker."""
    global _HANG_DEADLINE
    timeout = _timeout_s(item)
    grace = float(item.config.getini("hang_grace_s"))
    _HANG_DEADLINE = time.monotonic() + timeout + grace if timeout > 0 else None
    _arm_hang_backstop()
    try:
        yield
    finally:
        _HANG_DEADLINE = None
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(trylast=True)
def pytest_exception_interact() -> None:
    # pytest's faulthandler plugin cancels faulthandler's timer whenever a failure is reported: armed again.
    _arm_hang_backstop()


def _arm_hang_backstop() -> None:
    if _HANG_DEADLINE is not None and _STDERR_FD is not None:
        faulthandler.dump_traceback_later(max(1.0, _HANG_DEADLINE - time.monotonic()), exit=True, file=_STDERR_FD)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)
    # The modules of slow tests first (those marked ``slow(first=True)``, the longest, before the other slow ones),
    # in their order, then the rest in theirs: on test workers (`make test`), which take each module whole in this
    # order, the long ones overlap and the many short ones even out the end.
    rank: dict[str, int] = {}
    for item in items:
        marker = item.get_closest_marker("slow")
        if marker is not None:
            module = item.nodeid.split("::")[0]
            rank[module] = min(rank.get(module, 1), 0 if marker.kwargs.get("first") else 1)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], 2))
