"""Pytest setup for the whole suite: markers, warnings made errors, the slow modules first (the repo root is on the
path via pyproject.toml). Fixtures live in the conftest of the lowest directory that covers their users:
tests/integration/conftest.py (processes), tests/unit/conftest.py, tests/unit/broker/log/conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: JVM options for the Spark drivers the tests start (PySpark's gateway and spark-submit read SPARK_SUBMIT_OPTS;
#: children inherit it, the deployment's ETL under supervisord too). Runs of a few seconds on 2 cores spend much
#: of their time in the JVM itself: C2 compiler threads and the parallel collector's threads compete with the
#: job, so the client compiler alone and the serial collector start and load about a third faster (measured:
#: a local[2] session plus a small Parquet write, 17-20 s -> 11.5-12 s). The tests' semantics are the same.
SPARK_TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


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
