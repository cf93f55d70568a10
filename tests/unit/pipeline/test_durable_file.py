"""pipeline.durable_file: atomic replacement and durable appends, with the modes asked for."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pipeline.durable_file import TMP_SUFFIX, append_durably, write_atomically


def test_write_atomically_replaces_the_whole_file_and_leaves_no_temporary(tmp_path: Path, umask_022) -> None:
    path = tmp_path / "state.json"
    write_atomically(path, b"old content, longer than the new")
    write_atomically(path, b"new", mode=0o600)
    assert path.read_bytes() == b"new"
    assert not (tmp_path / ("state.json" + TMP_SUFFIX)).exists()
    # The mode applies to the file that replaced the old one.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_append_durably_adds_to_the_end_and_creates_the_file_owner_only(tmp_path: Path, umask_022) -> None:
    path = tmp_path / "quarantine.jsonl"
    append_durably(path, b"first\n")
    append_durably(path, b"second\n" * 10_000)
    assert path.read_bytes() == b"first\n" + b"second\n" * 10_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileNotFoundError):
        append_durably(tmp_path / "missing" / "file", b"x")
