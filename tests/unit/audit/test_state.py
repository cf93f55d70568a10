"""The audit's checkpointed counts: a save writes what changed (a journal record of the changed windows and the
offsets), a restart replays the journal over the checkpoint with a torn tail cut off, the journal is folded into
the checkpoint when it outgrows it, and the single-file JSON checkpoint of before is still read."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import numpy as np

import audit.state
from audit.state import CheckpointedCounts, CountKey
from pipeline.auditing.sketch import EventSketch

NOW = 1_700_000_000_000
RETAIN = 6 * 3_600_000


def open_counts(path: Path, now: int = NOW) -> CheckpointedCounts:
    return CheckpointedCounts(path, RETAIN, lambda: now)


def fill(counts: CheckpointedCounts, windows: int, events: int = 3, tier: str = "datacenter") -> list[CountKey]:
    keys = [(tier, "PageViewEvent", "dc1", NOW - 1000 * (n + 1) * 60) for n in range(windows)]
    for key in keys:
        for _ in range(events):
            counts.count(key, 100, uuid.uuid4().bytes)
    return keys


def written_by(action) -> int:
    """Bytes this process handed to write() while ``action`` ran."""
    def wchar() -> int:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))
    before = wchar()
    action()
    return wchar() - before


def as_plain(counts: CheckpointedCounts) -> dict:
    return {k: (c.count, c.bytes, c.hosts, None if c.sketch is None else c.sketch.cells.tolist())
            for k, c in counts.snapshot().items()}


def test_a_save_after_one_window_changed_writes_about_that_window_not_every_retained_one(tmp_path):
    counts = open_counts(tmp_path / "dc1-events")
    keys = fill(counts, 400)
    counts.save({("PageViewEvent", 0): 1200})
    window_bytes = EventSketch().size_bytes + 200  # its sketch, its key and counts, the offsets, the framing
    counts.count(keys[7], 100, uuid.uuid4().bytes)
    one = written_by(lambda: counts.save({("PageViewEvent", 0): 1201}))
    assert 0 < one <= window_bytes, f"{one} bytes written for one changed window of {window_bytes}"
    # Nothing changed: nothing written.
    assert written_by(lambda: counts.save({("PageViewEvent", 0): 1201})) == 0
    counts.close()


def test_a_restart_replays_the_journal_and_ignores_a_torn_tail_offsets_included(tmp_path):
    base = tmp_path / "dc1-events"
    counts = open_counts(base)
    keys = fill(counts, 5)
    counts.save({("PageViewEvent", 0): 15})
    counts.count(keys[1], 100, uuid.uuid4().bytes)
    counts.count(keys[2], 100, uuid.uuid4().bytes)
    counts.save({("PageViewEvent", 0): 17})
    expected = as_plain(counts)
    counts.count(keys[3], 100, uuid.uuid4().bytes)  # saved below, then torn by the "crash"
    counts.save({("PageViewEvent", 0): 18})
    counts.close()
    journal = base.with_name(base.name + ".journal")
    size = journal.stat().st_size
    with open(journal, "r+b") as out:
        out.truncate(size - 10)

    again = open_counts(base)
    assert again.load() == {("PageViewEvent", 0): 17}
    assert as_plain(again) == expected
    assert again.take_changed() == set(keys)  # all read back, to be reconciled once more
    # The torn record is gone from the file: what is appended next is read at the next start.
    again.count(keys[4], 100, uuid.uuid4().bytes)
    again.save({("PageViewEvent", 0): 18})
    expected = as_plain(again)
    again.close()
    with open(journal, "ab") as out:
        out.write(os.urandom(300))  # garbage where a record would start: not a record
    third = open_counts(base)
    assert third.load() == {("PageViewEvent", 0): 18}
    assert as_plain(third) == expected
    third.close()


def test_the_journal_is_folded_into_the_checkpoint_and_a_crash_between_the_two_steps_applies_nothing_twice(
        tmp_path, monkeypatch):
    monkeypatch.setattr(audit.state, "MIN_COMPACT_BYTES", 0)
    base = tmp_path / "dc1-audit"
    journal = base.with_name(base.name + ".journal")
    counts = open_counts(base)
    keys = fill(counts, 3, tier="producer")
    counts.save({("audit", 0): 3})
    assert journal.stat().st_size == 0  # folded at once (the journal outgrew an empty checkpoint)
    for n in range(4):
        counts.count(keys[0], 100, uuid.uuid4().bytes)
        counts.save({("audit", 0): 4 + n})
    assert 0 < journal.stat().st_size
    before_fold = journal.read_bytes()
    while journal.stat().st_size:  # grows until larger than the checkpoint, then is folded
        counts.count(keys[1], 100, uuid.uuid4().bytes)
        counts.save({("audit", 0): counts.load()[("audit", 0)] + 1})
    expected, offsets = as_plain(counts), counts.load()
    counts.close()
    journal.write_bytes(before_fold)  # as if the process died after the checkpoint's rename, before the truncate
    again = open_counts(base)
    assert again.load() == offsets and as_plain(again) == expected
    again.close()


def test_windows_past_retention_and_their_record_ids_are_dropped_and_stay_dropped(tmp_path):
    base = tmp_path / "dc1-audit"
    counts = open_counts(base)
    old, new = ("producer", "T", "dc1", NOW - RETAIN - 60_000), ("producer", "T", "dc1", NOW - 60_000)
    counts.count(old, 1, None)
    assert counts.first_seen("r-old", old[3]) and counts.first_seen("r-new", new[3])
    assert not counts.first_seen("r-new", new[3])
    counts.save({("audit", 0): 1})
    counts.count(new, 1, None)
    counts.save({("audit", 0): 2})
    counts.close()
    again = open_counts(base)
    assert set(again.snapshot()) == {new}
    assert again.first_seen("r-old", old[3]) and not again.first_seen("r-new", new[3])
    again.close()


def test_the_single_file_json_checkpoint_of_before_is_read_and_turned_into_a_checkpoint(tmp_path):
    base = tmp_path / "dc1-audit"
    sketch = EventSketch()
    sketch.add([uuid.uuid4().bytes for _ in range(5)])
    key = ("producer", "PageViewEvent", "dc1", NOW - 120_000)
    legacy = base.with_name(base.name + ".json")
    legacy.write_text(json.dumps({
        "offsets": [["audit", 0, 42]], "extra": {"seen": {"r1": key[3]}},
        "counts": [[*key, 5, 500, 2, base64.b64encode(sketch.to_bytes()).decode()],
                   ["producer", "ClickEvent", "dc1", key[3], 1, 10, 1, None]]}))
    for _ in range(2):  # the second time from the checkpoint it was turned into
        counts = open_counts(base)
        assert counts.load() == {("audit", 0): 42}
        got = counts.snapshot()
        assert (got[key].count, got[key].bytes, got[key].hosts) == (5, 500, 2)
        assert np.array_equal(got[key].sketch.cells, sketch.cells)
        assert got[("producer", "ClickEvent", "dc1", key[3])].sketch is None
        assert not counts.first_seen("r1", key[3])
        counts.close()
        assert not legacy.exists()
