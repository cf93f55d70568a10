"""FetchSlice: a region of a segment file that stays readable once the file is gone, read whole, closed once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log.fetch_slice import FetchSlice


def open_region(path: Path, data: bytes, position: int, size: int) -> FetchSlice:
    path.write_bytes(data)
    return FetchSlice(os.open(path, os.O_RDONLY), position, size)


def test_the_region_is_read_even_after_the_file_was_deleted(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    with open_region(path, b"0123456789", 2, 5) as region:
        path.unlink()
        assert region.read_bytes() == b"23456"
    assert region.fd is None


def test_an_empty_slice_reads_nothing_and_closes_quietly() -> None:
    region = FetchSlice.empty()
    assert (region.fd, region.position, region.size, region.read_bytes()) == (None, 0, 0, b"")
    region.close()
    region.close()


def test_a_region_past_the_end_of_the_file_is_an_eof_error(tmp_path: Path) -> None:
    with open_region(tmp_path / "short.log", b"abc", 1, 10) as region:
        with pytest.raises(EOFError, match="8 bytes before"):
            region.read_bytes()


def test_close_releases_the_descriptor_once(tmp_path: Path) -> None:
    region = open_region(tmp_path / "x.log", b"data", 0, 4)
    fd = region.fd
    region.close()
    region.close()
    with pytest.raises(OSError):
        os.fstat(fd)
