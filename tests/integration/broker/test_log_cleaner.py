"""The log cleaner's threads with their worker processes (python -m broker.log.cleaner_worker): a cleaner that keeps
up with appends, rolls and reads, and one the log manager starts and stops."""

from __future__ import annotations

import threading

from broker.log import Log
from broker.log.cleaner import CleanerConfig
from broker.log.log_manager import LogManager
from tests.support.cleaner import (
    cleaner_for, compact_config, compacted, latest_per_key, read_records, ready_to_clean, updates, write_updates,
)
from tests.support.polling import wait_until


def test_the_cleaner_thread_keeps_up_with_appends_rolls_and_reads(tmp_path):
    log = Log(tmp_path / "busy-0", compact_config(segment_bytes=1024))
    cleaner = cleaner_for(log, backoff_ms=1)
    cleaner.startup()
    try:
        written = []
        for round_ in range(15):
            written += write_updates(log, updates(keys=7, rounds=4, start=round_ * 28))
            log.update_high_watermark(log.log_end_offset)
            records = read_records(log)
            assert latest_per_key(records) == latest_per_key(written)
        ready_to_clean(log)
        expected = compacted(written)
        wait_until(lambda: read_records(log) == expected, message="the cleaner thread to finish the log")
        assert cleaner.stats()["logs"][("busy", 0)]["passes"] >= 1
    finally:
        cleaner.shutdown()
        log.close()


def test_the_log_manager_runs_the_cleaner_and_stops_it(tmp_path):
    manager = LogManager([tmp_path], compact_config(), cleaner_config=CleanerConfig(backoff_ms=20, dedupe_buffer_size=1 << 16))
    manager.startup()
    try:
        log = manager.get_or_create_log("compacted", 0, compact_config())
        written = write_updates(log, updates(keys=3, rounds=30))
        ready_to_clean(log)
        wait_until(lambda: len(read_records(log)) == 3, message="the cleaner thread to compact the log")
        assert read_records(log) == compacted(written)
        assert manager.truncate_to("compacted", 0, 85)
        manager.delete_log("compacted", 0)
        assert "compacted 0" not in (tmp_path / "cleaner-offset-checkpoint").read_text()
    finally:
        manager.shutdown()
    assert not any(t.name.startswith("kafka-log-cleaner") for t in threading.enumerate())
