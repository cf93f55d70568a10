"""pipeline.service.signals: SIGTERM and SIGINT set the stop event, threaded and asyncio."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from pipeline.service.signals import stop_on_signals, stop_on_signals_async


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sets_the_threaded_stop(signum: int) -> None:
    stop = stop_on_signals()
    assert not stop.is_set()
    os.kill(os.getpid(), signum)
    assert stop.wait(5)


def test_a_signal_sets_the_asyncio_stop() -> None:
    async def main() -> bool:
        stop = stop_on_signals_async()
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 5)
        return stop.is_set()

    assert asyncio.run(main())
