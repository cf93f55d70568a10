"""A log keeps one descriptor per segment (its .log) plus the active segment's two index files,
after rolling and after loading; reads of old segments open their indexes only for the lookup."""

from __future__ import annotations

import os
from collections import Counter

from tests.unit.test_log_support import make_batch, open_log, read_all

from broker.log import LogConfig


def open_files_under(directory) -> Counter:
    """Open descriptors of this process on files in ``directory``, counted by suffix."""
    counts: Counter = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith(f"{directory}/"):
            counts[target.rsplit(".", 1)[-1]] += 1
    return counts


def test_inactive_segments_keep_only_their_log_file_open(tmp_path):
    batch = make_batch(1, 100)
    config = LogConfig(segment_bytes=len(batch), index_interval_bytes=0)
    log = open_log(tmp_path, config)
    for _ in range(30):
        log.append_as_leader(batch)
    assert log.segment_count == 30
    assert open_files_under(log.dir) == {"log": 30, "index": 1, "timeindex": 1}
    assert read_all(log) == [(i, 1) for i in range(30)]
    assert open_files_under(log.dir) == {"log": 30, "index": 1, "timeindex": 1}
    log.close()
    assert open_files_under(log.dir) == {}

    reloaded = open_log(tmp_path, config)
    try:
        assert open_files_under(reloaded.dir) == {"log": 30, "index": 1, "timeindex": 1}
        assert read_all(reloaded, 7)[0] == (7, 1)
    finally:
        reloaded.close()
