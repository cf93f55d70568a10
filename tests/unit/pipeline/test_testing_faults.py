"""pipeline.testing_faults: the declared testing.* rows, the one reader, and the pause."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.config import Config, ConfigError
from pipeline.testing_faults import Faults, pause_here, fault_properties
from tests.support.polling import wait_until


def test_a_service_declares_only_the_faults_it_injects() -> None:
    assert fault_properties() == ()
    assert [p.name for p in fault_properties(drops_events=True)] == ["testing.drop.event.ids"]
    rows = fault_properties(("a", "b"), drops_events=True)
    assert [p.name for p in rows] == ["testing.pause.at", "testing.pause.file", "testing.drop.event.ids"]
    assert all(p.doc.startswith("TEST ONLY") and p.default == "" for p in rows)


def test_the_faults_are_read_once_into_a_frozen_value() -> None:
    config = Config(fault_properties(("a", "b"), drops_events=True),
                    {"testing.pause.at": "b", "testing.pause.file": "/m", "testing.drop.event.ids": " x, y,,"})
    assert Faults.of(config) == Faults("b", "/m", frozenset({"x", "y"}))
    assert Faults.of(Config(fault_properties())) == Faults() == Faults.of({})
    with pytest.raises(ConfigError, match="expected one of , a, b"):
        Config(fault_properties(("a", "b")), {"testing.pause.at": "c"})


def test_a_pause_elsewhere_does_nothing_and_one_here_writes_the_marker_and_waits(tmp_path: Path) -> None:
    marker = tmp_path / "paused"
    Faults("b", str(marker)).pause("a")
    pause_here("a", "", str(marker))
    assert not marker.exists()
    paused = threading.Thread(target=Faults("b", str(marker)).pause, args=("b",), daemon=True)
    paused.start()
    wait_until(lambda: marker.exists() and marker.read_text().endswith(" b\n"), 10, message="the marker")
    assert paused.is_alive()
