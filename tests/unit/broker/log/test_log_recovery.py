"""Loading a log: recovery after an unclean shutdown, the recovery point, and damaged indexes."""

from __future__ import annotations

import os

import pytest
from tests.unit.broker.log.log_support import make_batch, open_log, read_all

from broker.log import LogConfig
from pipeline.records.batch import iter_batches

SMALL_INDEX = LogConfig(index_interval_bytes=300, segment_bytes=8_000)


def segment_path(log_dir, base: int, ext: str = ".log"):
    return log_dir / f"{base:020d}{ext}"


def write_log(tmp_path, batches: int, config: LogConfig = SMALL_INDEX) -> list[tuple[int, int]]:
    """Append ``batches`` batches of 3 records and close without a flush or clean marker."""
    log = open_log(tmp_path, config)
    for i in range(batches):
        log.append_as_leader(make_batch(3, 120, timestamp=1_000 + i))
    written = read_all(log)
    log.close()
    return written


def whole_batches_of(path) -> tuple[list[int], int]:
    data = path.read_bytes()
    found = list(iter_batches(data))
    end = found[-1][0] + found[-1][1].size if found else 0
    return [h.base_offset for _, h in found], end


def test_recovery_of_a_tail_cut_mid_batch(tmp_path):
    written = write_log(tmp_path, 20, LogConfig(index_interval_bytes=300))
    log_file = segment_path(tmp_path / "topic-0", 0)
    size = log_file.stat().st_size
    os.truncate(log_file, size - 40)
    log = open_log(tmp_path, LogConfig(index_interval_bytes=300), recovery_point=0)
    try:
        assert log.log_end_offset == 57
        assert read_all(log) == written[:-1]
        assert log_file.stat().st_size == size - (size // 20)  # exactly the 19 whole batches remain
        bases, end = whole_batches_of(log_file)
        assert end == log_file.stat().st_size and bases[-1] == 54
        assert log.append_as_leader(make_batch(2)).first_offset == 57
        assert read_all(log)[-1] == (57, 2)
    finally:
        log.close()


def test_recovery_of_garbage_appended_after_the_last_batch(tmp_path):
    written = write_log(tmp_path, 10)
    log_file = segment_path(tmp_path / "topic-0", 0)
    good_size = log_file.stat().st_size
    with open(log_file, "ab") as f:
        f.write(b"\x00" * 7 + b"\x7f\xff\xff\xff" + os.urandom(500))
    log = open_log(tmp_path, SMALL_INDEX)
    try:
        assert log_file.stat().st_size == good_size
        assert read_all(log) == written
        assert log.append_as_leader(make_batch(1)).first_offset == 30
    finally:
        log.close()


def test_recovery_stops_at_a_crc_mismatch_and_drops_later_segments(tmp_path):
    written = write_log(tmp_path, 60)
    log_dir = tmp_path / "topic-0"
    bases = sorted(int(name[:20]) for name in os.listdir(log_dir) if name.endswith(".log"))
    assert len(bases) >= 3
    second = segment_path(log_dir, bases[1])
    data = bytearray(second.read_bytes())
    positions = [pos for pos, _ in iter_batches(bytes(data))]
    data[positions[2] + 100] ^= 0x55  # a record byte of the third batch of segment 2
    second.write_bytes(bytes(data))
    log = open_log(tmp_path, SMALL_INDEX, recovery_point=0)
    try:
        kept = [entry for entry in written if entry[0] < bases[1] + 6]
        assert read_all(log) == kept
        assert log.log_end_offset == bases[1] + 6
        assert log.segment_base_offsets() == bases[:2]
        assert not segment_path(log_dir, bases[2]).exists()
        assert not segment_path(log_dir, bases[2], ".index").exists()
    finally:
        log.close()


def test_recovery_point_is_respected(tmp_path):
    """Damage below the recovery point is not looked for; damage above it is cut off."""
    written = write_log(tmp_path, 60)
    log_dir = tmp_path / "topic-0"
    bases = sorted(int(name[:20]) for name in os.listdir(log_dir) if name.endswith(".log"))
    for base in bases[:2]:
        path = segment_path(log_dir, base)
        data = bytearray(path.read_bytes())
        data[-5] ^= 0x55  # a record byte of the segment's last batch
        path.write_bytes(bytes(data))
    log = open_log(tmp_path, SMALL_INDEX, recovery_point=bases[1])
    try:
        assert log.log_end_offset == bases[2] - 3
        # Segment 0's damaged last batch is below the recovery point: still there.
        assert read_all(log, check_crc=False) == [entry for entry in written if entry[0] < bases[2] - 3]
        assert log.recovery_point == bases[1]
    finally:
        log.close()


def test_clean_shutdown_skips_recovery(tmp_path):
    written = write_log(tmp_path, 10)
    log_file = segment_path(tmp_path / "topic-0", 0)
    data = bytearray(log_file.read_bytes())
    data[-5] ^= 0x55  # undetectable without a CRC scan
    log_file.write_bytes(bytes(data))
    log = open_log(tmp_path, SMALL_INDEX, last_shutdown_clean=True)
    try:
        assert read_all(log, check_crc=False) == written
        assert log.recovery_point == log.log_end_offset == 30
    finally:
        log.close()
    unclean = open_log(tmp_path, SMALL_INDEX, recovery_point=0)
    try:
        assert unclean.log_end_offset == 27
    finally:
        unclean.close()


def test_torn_tail_is_repaired_even_when_the_shutdown_looked_clean(tmp_path):
    written = write_log(tmp_path, 10)
    log_file = segment_path(tmp_path / "topic-0", 0)
    os.truncate(log_file, log_file.stat().st_size - 1)
    log = open_log(tmp_path, SMALL_INDEX, last_shutdown_clean=True)
    try:
        assert read_all(log) == written[:-1]
        assert log.append_as_leader(make_batch(1)).first_offset == 27
    finally:
        log.close()


@pytest.mark.parametrize(
    "damage",
    ["torn", "unordered", "past_end", "missing", "wrong_offset", "timeindex_torn", "timeindex_missing"],
)
def test_damaged_index_is_rebuilt_at_load(tmp_path, damage):
    written = write_log(tmp_path, 40, LogConfig(index_interval_bytes=300))
    log_dir = tmp_path / "topic-0"
    index = segment_path(log_dir, 0, ".index")
    time_index = segment_path(log_dir, 0, ".timeindex")
    good_index, good_time_index = index.read_bytes(), time_index.read_bytes()
    assert len(good_index) >= 8 * 10
    if damage == "torn":
        index.write_bytes(good_index[:-3])
    elif damage == "unordered":
        index.write_bytes(good_index[8:16] + good_index[:8] + good_index[16:])
    elif damage == "past_end":
        index.write_bytes(good_index[:-8] + (39).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    elif damage == "missing":
        index.unlink()
    elif damage == "wrong_offset":
        last_position = good_index[-4:]
        index.write_bytes(good_index[:-8] + (118).to_bytes(4, "big") + last_position)
    elif damage == "timeindex_torn":
        time_index.write_bytes(good_time_index[:-1])
    elif damage == "timeindex_missing":
        time_index.unlink()
    log = open_log(tmp_path, LogConfig(index_interval_bytes=300), last_shutdown_clean=True)
    try:
        assert index.read_bytes() == good_index
        assert time_index.read_bytes() == good_time_index
        assert read_all(log) == written
        for offset in (0, 50, 61, 119):
            with log.read(offset, 1) as fetched:
                assert [h.base_offset for _, h in iter_batches(fetched.read_bytes())] == [offset - offset % 3]
        assert log.offset_for_timestamp(1_020) == (56, 1_020)  # batch i holds timestamps 1000+i .. 1002+i
    finally:
        log.close()


def test_orphan_and_temporary_files_are_cleaned_at_load(tmp_path):
    write_log(tmp_path, 3)
    log_dir = tmp_path / "topic-0"
    (log_dir / f"{500:020d}.index").write_bytes(b"\x00" * 8)
    (log_dir / f"{0:020d}.log.deleted").write_bytes(b"old")
    (log_dir / "partition.metadata").write_text("kept")
    log = open_log(tmp_path, SMALL_INDEX, last_shutdown_clean=True)
    try:
        names = set(os.listdir(log_dir))
        assert f"{500:020d}.index" not in names
        assert f"{0:020d}.log.deleted" not in names
        assert "partition.metadata" in names
        assert log.log_end_offset == 9
    finally:
        log.close()


def test_recovered_segment_state_supports_time_rolls_and_reads(tmp_path):
    config = LogConfig(index_interval_bytes=300, segment_ms=60_000)
    write_log(tmp_path, 5, config)
    log = open_log(tmp_path, config, recovery_point=0)
    try:
        # The first batch's max timestamp (1_002) is the base of the time roll.
        log.append_as_leader(make_batch(1, timestamp=1_002 + 60_000))
        assert log.segment_count == 1
        log.append_as_leader(make_batch(1, timestamp=1_002 + 60_001))
        assert log.segment_base_offsets() == [0, 16]
    finally:
        log.close()
