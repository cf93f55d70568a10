"""Fixtures of the log's unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from broker.log import Log, LogConfig


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    """A fresh log under tmp_path with 1 MiB segments; closed after the test."""
    # Imported here, not while conftests load: kafka-python's deprecation warnings are filtered only from
    # pytest_configure on.
    from tests.unit.broker.log.log_support import open_log

    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 20))
    yield log
    log.close()
