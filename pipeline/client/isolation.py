"""Consumers' isolation levels and the read_committed filter (Kafka's consumer side of KIP-98).

read_uncommitted (0, the default) hands out every data record up to the high watermark; read_committed (1)
asks the broker to stop at the last stable offset and leaves out the batches of aborted transactions, which
the Fetch response names as AbortedTransactions (producer id, first offset). The filter is Kafka's consumer's:
walking the batches in offset order, a producer's transaction counts as aborted from the first offset the
broker named for it until that producer's ABORT control batch; its transactional batches in between are
skipped. Control batches are never handed out, whatever the level.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from pipeline.records import decode_batch
from pipeline.records.batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, BatchHeader, iter_batches
from pipeline.records.control import ControlRecordType, parse_control_key

__all__ = ["ISOLATION_LEVELS", "READ_COMMITTED", "READ_UNCOMMITTED", "committed_batches", "parse_isolation_level"]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: The config spelling of each level, as Kafka's isolation.level takes it.
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}

Buffer = bytes | bytearray | memoryview


def parse_isolation_level(text: str | int) -> int:
    """read_uncommitted -> 0, read_committed -> 1 (the ints themselves pass)."""
    if isinstance(text, int):
        if text in (READ_UNCOMMITTED, READ_COMMITTED):
            return text
    else:
        level = ISOLATION_LEVELS.get(text.strip().lower())
        if level is not None:
            return level
    raise ValueError(f"expected read_uncommitted or read_committed, got {text!r}")


def _is_abort_marker(data: Buffer, pos: int) -> bool:
    records = decode_batch(data, pos, check_crc=False)[1]
    if not records:
        return False
    try:
        return parse_control_key(records[0].key) == ControlRecordType.ABORT
    except ValueError:
        return False


def committed_batches(data: Buffer, offset: int, aborted: Iterable[tuple[int, int]] | Sequence[dict]
                      ) -> tuple[list[tuple[int, BatchHeader]], int, bool]:
    """The batches of ``data`` (a read_committed Fetch answer from ``offset``) to hand out, the offset after
    the last whole batch (skipped ones included, so that the position always moves past them), and whether
    there was a whole batch at all. ``aborted``: the response's AbortedTransactions, as (producer id, first
    offset) pairs or its dicts."""
    pending = sorted(((a["first_offset"], a["producer_id"]) if isinstance(a, dict) else (a[1], a[0])
                      for a in aborted), reverse=True)
    aborting: set[int] = set()
    batches: list[tuple[int, BatchHeader]] = []
    next_offset = offset
    whole = False
    for pos, header in iter_batches(data, True):
        whole = True
        last = header.base_offset + header.last_offset_delta
        if last < offset:
            continue
        next_offset = last + 1
        attributes = header.attributes
        producer_id = header.producer_id
        if producer_id >= 0:
            while pending and pending[-1][0] <= last:
                aborting.add(pending.pop()[1])
            if attributes & CONTROL_FLAG:
                if producer_id in aborting and _is_abort_marker(data, pos):
                    aborting.discard(producer_id)
                continue
            if attributes & TRANSACTIONAL_FLAG and producer_id in aborting:
                continue
        elif attributes & CONTROL_FLAG:
            continue
        batches.append((pos, header))
    return batches, next_offset, whole
