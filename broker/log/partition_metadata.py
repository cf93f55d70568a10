"""The ``partition.metadata`` file of a partition directory: which incarnation of its topic the log belongs to.

Kafka's format: ``version: 0`` and ``topic_id: <id>`` lines. A topic deleted while one of its brokers was
down, then created again under the same name, has a new id; the returning broker compares ids before
leading the partition, so it never serves the old incarnation's data as the new topic's.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.durable_file import write_atomically

FILE_NAME = "partition.metadata"


def read_topic_id(partition_dir: Path) -> str | None:
    """The topic id recorded in ``partition_dir``, or None when there is no (readable) record."""
    try:
        text = (partition_dir / FILE_NAME).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "topic_id":
            return value.strip() or None
    return None


def write_topic_id(partition_dir: Path, topic_id: str) -> None:
    """Record ``topic_id`` atomically and durably."""
    write_atomically(partition_dir / FILE_NAME, f"version: 0\ntopic_id: {topic_id}\n".encode())
