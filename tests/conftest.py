"""Shared pytest setup: markers and the broker fixtures (the repo root is on the path via pyproject.toml)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.support import BrokerProcess

BrokerFactory = Callable[..., BrokerProcess]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds (large data volumes)")
    config.addinivalue_line("markers", "integration: starts real processes on loopback ports")
    # kafka-python 3.x loads its protocol schemas with the legacy importlib.resources API.
    config.addinivalue_line("filterwarnings", r"ignore:(read_text|open_text) is deprecated:DeprecationWarning")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start brokers on demand: `broker_factory(overrides={...}, start=True)`; all are stopped after the test.

    Each broker gets its own log dir under the test's tmp_path and a free loopback port.
    """
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, object] | None = None, start: bool = True, **kwargs: object) -> BrokerProcess:
        index = len(started)
        broker = BrokerProcess(
            tmp_path / f"broker{index}" / "logs",
            overrides=overrides,
            log_path=tmp_path / f"broker{index}" / "broker.log",
            **kwargs,
        )
        started.append(broker)
        if start:
            broker.start()
        return broker

    yield make
    errors = []
    for broker in started:
        try:
            broker.stop()
        except Exception as error:  # keep stopping the others; report after
            errors.append(error)
        finally:
            broker.kill()
    if errors:
        raise errors[0]


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """One running standalone broker with default settings (auto topic creation as configured by the broker)."""
    return broker_factory()
