"""iter_file_batches (broker.log.file_records): every batch of a file in chunks of any size, whole
when asked, stopping at a torn tail and refusing a bad header."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log.errors import CorruptRecordError
from broker.log.file_records import iter_file_batches
from pipeline.records import encode_batch

TS = 1_700_000_000_000


def write_file(tmp_path: Path, sizes: list[int]) -> tuple[int, list[bytes]]:
    batches = []
    offset = 0
    for i, size in enumerate(sizes):
        batches.append(encode_batch([bytes([i % 256]) * size] * 3, timestamp=TS, base_offset=offset))
        offset += 3
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return os.open(path, os.O_RDONLY), batches


def positions(batches: list[bytes]) -> list[int]:
    out, pos = [], 0
    for batch in batches:
        out.append(pos)
        pos += len(batch)
    return out


@pytest.mark.parametrize("chunk", [61, 100, 1000, 5000, 1 << 20])
@pytest.mark.parametrize("whole", [False, True])
def test_every_batch_at_any_chunk_size(tmp_path: Path, chunk: int, whole: bool) -> None:
    fd, batches = write_file(tmp_path, [10, 2000, 30, 700, 5, 3000, 1])
    try:
        end = sum(map(len, batches))
        seen = list(iter_file_batches(fd, 0, end, chunk, whole=whole))
        assert [pos for pos, _, _, _ in seen] == positions(batches)
        assert [h.base_offset for _, h, _, _ in seen] == [3 * i for i in range(len(batches))]
        if whole:
            assert [bytes(buf[off : off + h.size]) for _, h, buf, off in seen] == batches
    finally:
        os.close(fd)


def test_from_a_start_position_up_to_an_end(tmp_path: Path) -> None:
    fd, batches = write_file(tmp_path, [10, 20, 30, 40])
    try:
        starts = positions(batches)
        seen = [pos for pos, _, _, _ in iter_file_batches(fd, starts[1], starts[3], 4096)]
        assert seen == starts[1:3]
    finally:
        os.close(fd)


@pytest.mark.parametrize("cut", [1, 30, 61, 100])
def test_a_torn_tail_ends_the_iteration(tmp_path: Path, cut: int) -> None:
    fd, batches = write_file(tmp_path, [10, 200])
    try:
        end = len(batches[0]) + cut
        for whole in (False, True):
            assert [pos for pos, _, _, _ in iter_file_batches(fd, 0, end, 64, whole=whole)] == [0]
    finally:
        os.close(fd)


@pytest.mark.parametrize("field, value", [(slice(8, 12), (10).to_bytes(4, "big")), (slice(16, 17), b"\x01")])
def test_a_bad_header_is_corrupt_and_named(tmp_path: Path, field: slice, value: bytes) -> None:
    first = encode_batch([b"a"], timestamp=TS)
    second = bytearray(encode_batch([b"b"], timestamp=TS, base_offset=1))
    second[field] = value
    path = tmp_path / "x.log"
    path.write_bytes(first + second)
    fd = os.open(path, os.O_RDONLY)
    try:
        seen = []
        with pytest.raises(CorruptRecordError, match=f"^x.log: bad batch header at byte {len(first)}$"):
            for pos, _, _, _ in iter_file_batches(fd, 0, len(first) + len(second), 4096, source="x.log"):
                seen.append(pos)
        assert seen == [0]
    finally:
        os.close(fd)
