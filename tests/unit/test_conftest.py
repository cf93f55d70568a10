"""The suite's hang backstop (tests/conftest.py): a test still running its grace after pytest-timeout fired, here
in a teardown that never ends, has its stacks written and its process ended instead of stalling the run."""

from __future__ import annotations

import time
from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def test_a_teardown_hanging_after_the_timeout_is_ended_with_its_stacks(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_stuck="""
        import time
        import pytest

        @pytest.fixture
        def stuck():
            yield
            time.sleep(60)

        @pytest.mark.timeout(1)
        def test_stuck(stuck):
            time.sleep(5)
    """)
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "hang_grace_s=2", timeout=50)
    assert time.monotonic() - started < 40
    assert result.ret != 0
    assert "Timeout (" in result.stderr.str() and "test_stuck.py" in result.stderr.str()
