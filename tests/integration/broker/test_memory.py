"""The broker keeps no message cache: storing 10x more data must not grow its memory (bench/broker_memory.py at scale)."""

from __future__ import annotations

import pytest

from tests.support.clients import create_topic
from tests.support.load import build_batch, produce_bulk

MB = 1024 * 1024
ALLOWED_GROWTH = 8 * MB


@pytest.mark.slow
def test_rss_flat_from_60mb_to_600mb(broker):
    create_topic(broker.bootstrap, "memory", 1)
    readings: dict[str, int] = {}

    def on_progress(stored: int) -> None:
        if "checkpoint" not in readings and stored >= 60 * MB:
            readings["checkpoint"] = broker.rss_bytes()

    produce_bulk(broker.host, broker.port, "memory", build_batch(512 * 1024), 600 * MB, on_progress=on_progress)
    readings["end"] = broker.rss_bytes()
    stored = sum(path.stat().st_size for path in broker.segment_files("memory", 0))
    assert stored >= 600 * MB, f"only {stored / MB:.0f} MiB reached the segment files"
    growth = readings["end"] - readings["checkpoint"]
    assert growth < ALLOWED_GROWTH, f"broker RSS grew {growth / MB:.1f} MiB from 60 MiB to 600 MiB stored ({readings})"
