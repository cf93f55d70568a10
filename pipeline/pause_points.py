"""Named pause points for fault-injection tests: a process told (by a declared setting of its own) to stop at a
point writes "<pid> <point>" to a marker file and waits forever there, for the test to SIGKILL it exactly at that
point. Used by the ETL (etl/faults.py: fault.pause.at and .file) and the log cleaner (broker/log/faults.py:
log.cleaner.fault.pause.at and .file)."""

from __future__ import annotations

import os
import time


def pause_here(point: str, pause_at: str, marker: str) -> None:
    """Wait forever if ``pause_at`` names ``point``, after writing the marker file ``marker`` (when given)."""
    if pause_at != point:
        return
    if marker:
        with open(marker, "w") as out:
            out.write(f"{os.getpid()} {point}\n")
    while True:
        time.sleep(3600)

