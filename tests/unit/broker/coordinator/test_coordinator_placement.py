"""Where a group or transactional id is placed: Kafka's partitionFor over Java's String.hashCode."""

from __future__ import annotations

from broker.coordinator.coordinator_placement import _java_string_hash, partition_for


def test_java_string_hash_matches_known_values() -> None:
    assert _java_string_hash("") == 0
    assert _java_string_hash("abc") == 96354
    assert _java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert _java_string_hash("\u00e9t\u00e9") == 0xE9 * 31 * 31 + ord("t") * 31 + 0xE9


def test_partition_for_masks_the_sign_as_kafka_utils_abs_does() -> None:
    assert partition_for("abc", 50) == 96354 % 50
    assert partition_for("polygenelubricants", 50) == 0
    assert all(0 <= partition_for(f"group-{i}", 50) < 50 for i in range(200))
