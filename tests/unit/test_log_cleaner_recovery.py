"""A cleaning pass cut short: by a crash at each point of the .cleaned/.swap protocol (the files as the
crash leaves them, loaded by a new Log), by a truncation, or by abort_and_pause."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from tests.unit.cleaner_support import (
    cleaner_for,
    compact_config,
    compacted,
    latest_per_key,
    read_records,
    ready_to_clean,
    write_updates,
)

from broker.log import Log
from broker.log.faults import PAUSE_POINTS, CleanerFaults
from broker.log.log_manager import LogManager
from broker.log.cleaner import CleanerConfig
from tests.support.polling import wait_until

TP = ("compacted", 0)


def updates(keys: int, rounds: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    return [(b"key-%02d" % (i % keys), b"value-%06d" % i) for i in range(start, start + keys * rounds)]


def leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith((".cleaned", ".swap", ".deleted")))


@pytest.fixture
def twice_cleaned(tmp_path):
    """A log cleaned once (small segments left) with new updates: its second pass merges segments."""
    log = Log(tmp_path / "logs" / "compacted-0", compact_config(file_delete_delay_ms=60_000))
    written = write_updates(log, updates(keys=6, rounds=40))
    ready_to_clean(log)
    assert cleaner_for(log).clean_once()
    written += write_updates(log, updates(keys=6, rounds=3, start=240))
    ready_to_clean(log)
    yield log, written
    log.close()


def crash_copy_at(point: str, log: Log, monkeypatch, tmp_path: Path) -> Path:
    """Run a pass, copying the log's directory when it reaches ``point``: what a SIGKILL there leaves."""
    copy = tmp_path / "crashed" / log.dir.name

    def pause(faults: CleanerFaults, reached: str) -> None:
        if reached == point and not copy.exists():
            shutil.copytree(log.dir, copy)

    monkeypatch.setattr(CleanerFaults, "pause", pause)
    assert cleaner_for(log).clean_once()
    assert copy.exists(), f"the pass never reached {point}"
    return copy


def assert_valid_compaction(recovered: list, before: list, after: list) -> None:
    """A state between the pass's start and end: nothing the pass kept is lost, nothing it had not
    is back, and every key's last record is the same (groups swapped before the crash are new, the
    crashed group old or new; a swap ending before its group's last segments leaves those, all
    superseded, for the next pass)."""
    assert set(after) <= set(recovered) <= set(before)
    assert recovered == sorted(recovered)
    assert latest_per_key(recovered) == latest_per_key(after)


@pytest.mark.parametrize("point", PAUSE_POINTS)
def test_a_crash_at_any_point_loses_nothing_compaction_keeps(twice_cleaned, point, monkeypatch, tmp_path):
    log, written = twice_cleaned
    before = read_records(log)
    copy = crash_copy_at(point, log, monkeypatch, tmp_path)
    after = read_records(log)
    assert after == compacted(written)
    assert any(name.endswith((".cleaned", ".swap")) for name in os.listdir(copy))
    recovered = Log(copy, compact_config())
    try:
        assert leftovers(copy) == []
        assert_valid_compaction(read_records(recovered), before, after)
        assert recovered.log_end_offset == log.log_end_offset
    finally:
        recovered.close()


@pytest.mark.parametrize("point", PAUSE_POINTS)
def test_the_crashed_group_is_old_before_the_swap_and_new_after(tmp_path, monkeypatch, point):
    """One group of segments, every record of each kept somewhere: the crash leaves exactly the old or the new set."""
    log = Log(tmp_path / "logs" / "compacted-0", compact_config(segment_bytes=600))
    written = write_updates(log, updates(keys=4, rounds=2))
    ready_to_clean(log)
    log.config.segment_bytes = 1 << 20  # one group for the pass
    before, bases_before = read_records(log), log.segment_base_offsets()
    copy = crash_copy_at(point, log, monkeypatch, tmp_path)
    assert read_records(log) == written[4:] and len(log.segment_base_offsets()) == 2 < len(bases_before)
    recovered = Log(copy, compact_config())
    try:
        assert leftovers(copy) == []
        if point == "during-swap":
            assert read_records(recovered) == written[4:]
            assert recovered.segment_base_offsets() == log.segment_base_offsets()
        else:
            assert read_records(recovered) == before and recovered.segment_base_offsets() == bases_before
    finally:
        recovered.close()
        log.close()


def test_a_swap_whose_indexes_are_still_cleaned_is_undone(twice_cleaned, monkeypatch, tmp_path):
    log, _ = twice_cleaned
    copy = crash_copy_at("before-swap", log, monkeypatch, tmp_path)
    cleaned_log = next(name for name in os.listdir(copy) if name.endswith(".log.cleaned"))
    os.rename(copy / cleaned_log, copy / cleaned_log.replace(".cleaned", ".swap"))
    # What the crash left without the unfinished replacement: the state the load must come back to.
    reference = tmp_path / "reference" / log.dir.name
    shutil.copytree(copy, reference)
    for name in os.listdir(reference):
        if name.endswith((".swap", ".cleaned")):
            os.unlink(reference / name)
    recovered, expected = Log(copy, compact_config()), Log(reference, compact_config())
    try:
        assert leftovers(copy) == [] and read_records(recovered) == read_records(expected)
    finally:
        recovered.close()
        expected.close()


def test_a_swap_renamed_to_its_final_log_name_keeps_the_new_segment(tmp_path, monkeypatch):
    log = Log(tmp_path / "logs" / "compacted-0", compact_config(segment_bytes=600))
    write_updates(log, updates(keys=4, rounds=2))
    ready_to_clean(log)
    log.config.segment_bytes = 1 << 20
    copy = crash_copy_at("during-swap", log, monkeypatch, tmp_path)
    for name in os.listdir(copy):
        if name.endswith((".log", ".index", ".timeindex")) and int(name[:20]) < log.segment_base_offsets()[-1]:
            os.rename(copy / name, copy / (name + ".deleted"))
    os.rename(copy / "00000000000000000000.log.swap", copy / "00000000000000000000.log")
    recovered = Log(copy, compact_config())
    try:
        assert leftovers(copy) == [] and read_records(recovered) == read_records(log)
        assert recovered.segment_base_offsets() == log.segment_base_offsets()
    finally:
        recovered.close()
        log.close()


def test_leftover_cleaned_files_are_removed_at_load(tmp_path):
    log = Log(tmp_path / "compacted-0", compact_config())
    written = write_updates(log, updates(keys=2, rounds=5))
    log.close()
    (log.dir / "00000000000000000000.log.cleaned").write_bytes(b"partial garbage")
    (log.dir / "00000000000000000000.index.cleaned").write_bytes(b"")
    reloaded = Log(log.dir, compact_config())
    try:
        assert leftovers(log.dir) == [] and read_records(reloaded) == written
    finally:
        reloaded.close()


def test_a_truncation_during_a_pass_voids_its_swap(tmp_path, monkeypatch):
    """A follower truncating into the segments being cleaned: the cleaned copy of the cut records
    must not be swapped in."""
    log = Log(tmp_path / "logs" / "compacted-0", compact_config(segment_bytes=600))
    written = write_updates(log, updates(keys=4, rounds=4))
    ready_to_clean(log)
    log.config.segment_bytes = 1 << 20  # one group for the pass
    cut = log.segment_base_offsets()[-2] + 1  # inside the last segment the pass cleans

    def pause(faults: CleanerFaults, point: str) -> None:
        if point == "before-swap":
            assert log.truncate_to(cut)

    monkeypatch.setattr(CleanerFaults, "pause", pause)
    cleaner_for(log).clean_once()
    assert log.log_end_offset == cut
    assert read_records(log) == written[:cut]
    assert not any(name.endswith((".cleaned", ".swap")) for name in os.listdir(log.dir))
    log.close()


def test_abort_and_pause_stops_a_pass_and_keeps_the_log_out_until_resumed(tmp_path, monkeypatch):
    log = Log(tmp_path / "compacted-0", compact_config())
    written = write_updates(log, updates(keys=30, rounds=2))
    ready_to_clean(log)
    cleaner = cleaner_for(log, io_buffer_size=64)
    aborter = threading.Thread(target=cleaner.abort_and_pause, args=TP)

    def pause(faults: CleanerFaults, point: str) -> None:
        if point == "writing-cleaned" and not aborter.is_alive() and aborter.ident is None:
            aborter.start()
            wait_until(lambda: TP in cleaner.manager._aborting, message="the abort to be asked")

    monkeypatch.setattr(CleanerFaults, "pause", pause)
    assert cleaner.clean_once()
    aborter.join(5)
    assert not aborter.is_alive()
    assert not any(name.endswith(".cleaned") for name in os.listdir(log.dir))
    assert len(read_records(log)) > 30 and latest_per_key(read_records(log)) == latest_per_key(written)
    assert not (log.dir.parent / "cleaner-offset-checkpoint").exists()
    assert not cleaner.clean_once()
    cleaner.resume(*TP)
    assert cleaner.clean_once()
    assert len(read_records(log)) == 30
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
