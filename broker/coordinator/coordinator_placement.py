"""Which broker coordinates a group: one live broker per group, the same answer on every broker.

Rendezvous (highest random weight) hashing of the group id over the eligible brokers: every broker that
sees the same live set names the same coordinator, and a broker joining or leaving moves only the groups
it wins or held, not everyone's.
"""

from __future__ import annotations

import hashlib
from typing import Iterable


def _weight(group_id: str, broker_id: int) -> bytes:
    return hashlib.blake2b(f"{broker_id}\x00{group_id}".encode(), digest_size=8).digest()


def coordinator_for(group_id: str, brokers: Iterable[int]) -> int | None:
    """The coordinator of ``group_id`` among ``brokers``; None when there is none."""
    return max(brokers, key=lambda broker_id: _weight(group_id, broker_id), default=None)


#: The internal topics whose partitions Kafka's coordinators use; here their names and partition counts only
#: number what clients and WriteTxnMarkers see (the coordinators keep their state in ZooKeeper or the log dir).
GROUP_METADATA_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def _java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's partitionFor for a group or transactional id: Utils.abs(key.hashCode) % partitions (Utils.abs
    maps Integer.MIN_VALUE to 0 by masking the sign bit)."""
    return (_java_string_hash(key) & 0x7FFFFFFF) % partitions
