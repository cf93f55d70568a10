"""mirror.service's pieces that need no clusters: the error that names lost offsets and how to skip them, and the
serializer that hands the producer a pending record's value as it came from the source."""

from __future__ import annotations

from mirror.service import LostOffsetsError, MirrorError, _Pending, _PendingValues
from mirror.tracker import Gap, SourcePartition


def pending(value: bytes | None) -> _Pending:
    return _Pending(SourcePartition("dc1", "clicks", 0), 5, b"key", value, [], 10, 1_000, 0.0)


def test_lost_offsets_name_the_partition_the_range_the_count_and_the_setting_that_skips_them() -> None:
    gap = Gap(SourcePartition("dc1", "clicks", 3), 100, 250)
    error = LostOffsetsError(gap)
    assert isinstance(error, MirrorError) and error.gap is gap
    assert str(error) == ("source dc1: clicks-3 offsets 100..249 (150 records) were deleted by the source's retention "
                          "before they were mirrored; restart with skip.lost.offsets=true (--skip-lost-offsets) to "
                          "skip them")


def test_the_producer_sends_the_source_values_unchanged_and_a_null_value_stays_null() -> None:
    values = _PendingValues()
    assert values.encode(pending(b"\x00\x01avro")) == b"\x00\x01avro"
    assert values.encode(pending(None)) is None
    assert values.encode_all([pending(b"a"), pending(None), pending(b"c")]) == [b"a", None, b"c"]
