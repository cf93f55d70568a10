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
