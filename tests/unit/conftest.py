"""Fixtures shared by unit tests of several packages."""

from __future__ import annotations

import os
from typing import Iterator

import pytest


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The process umask 022 for the test (what a file's mode asked for must not depend on the caller's umask)."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)
