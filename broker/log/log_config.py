"""Per-log settings, named after Kafka's log.* / topic-level properties."""

from __future__ import annotations

from dataclasses import dataclass, field

# Kafka's lower bounds of segment.bytes (the overhead of the smallest legacy record, 14 bytes) and of
# segment.index.bytes. The upper bound of both is 2^31-1: index entries hold 32-bit file positions.
MIN_SEGMENT_BYTES = 14
MIN_INDEX_BYTES = 4
INT64_MAX = 2**63 - 1
# Where the broker's testing.pause.at stops a cleaning pass, in the order a pass meets them: part of a .cleaned
# segment is written (in the cleaner worker); the .cleaned segment is complete and synced, not yet renamed .swap (in
# the worker); the .swap files are in place and the first replaced segment renamed .deleted (in the broker).
CLEANER_PAUSE_POINTS = ("writing-cleaned", "before-swap", "during-swap")

#: cleanup.policy values: delete old segments (retention), compact (keep each key's latest record), or both.
CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
CLEANUP_POLICIES = frozenset({CLEANUP_DELETE, CLEANUP_COMPACT})


def parse_cleanup_policy(text: str) -> frozenset[str]:
    """cleanup.policy / log.cleanup.policy: "delete", "compact" or both, comma-separated (Kafka's LIST type);
    ValueError for anything else."""
    values = frozenset(part.strip() for part in text.split(","))
    if not values or not values <= CLEANUP_POLICIES:
        raise ValueError("must be delete, compact or compact,delete")
    return values


@dataclass
class LogConfig:
    """The settings of one partition's log; the comments give the Kafka property each mirrors."""

    segment_bytes: int = 1 << 30  # log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # log.roll.ms / log.roll.hours
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    max_index_size: int = 10 * 1024 * 1024  # log.index.size.max.bytes (roll when an index is full)
    flush_interval_messages: int | None = None  # log.flush.interval.messages (None: page cache decides)
    flush_interval_ms: int | None = None  # log.flush.interval.ms
    retention_ms: int | None = 168 * 3600 * 1000  # log.retention.ms/hours (None or -1: unlimited)
    retention_bytes: int | None = None  # log.retention.bytes (None or -1: unlimited)
    max_message_bytes: int = 1048588  # message.max.bytes (per batch, as Kafka)
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms (0: delete retained segments at once)
    min_insync_replicas: int = 1  # min.insync.replicas (checked by acks=all produces)
    cleanup_policy: frozenset[str] = field(default_factory=lambda: frozenset({CLEANUP_DELETE}))  # cleanup.policy
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio / log.cleaner.min.cleanable.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: records younger than this are not compacted
    max_compaction_lag_ms: int = INT64_MAX  # max.compaction.lag.ms: records older are compacted whatever the ratio
    delete_retention_ms: int = 86_400_000  # delete.retention.ms: how long tombstones outlive their cleaning

    @property
    def compact(self) -> bool:
        """Whether the log cleaner keeps only each key's latest record."""
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments (cleanup.policy delete, alone or with compact)."""
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def retention_ms_limit(self) -> int | None:
        """retention_ms, or None when retention by time is disabled (None or a negative value)."""
        if self.retention_ms is None or self.retention_ms < 0:
            return None
        return self.retention_ms

    @property
    def retention_bytes_limit(self) -> int | None:
        """retention_bytes, or None when retention by size is disabled (None or a negative value)."""
        if self.retention_bytes is None or self.retention_bytes < 0:
            return None
        return self.retention_bytes
