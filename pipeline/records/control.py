"""Control batches: the transaction markers a coordinator has written into a partition (Kafka's
EndTransactionMarker and ControlRecordType).

A control batch has the control and transactional attribute bits set, the producer id and epoch of the
transaction it ends, no sequence number, and one record whose key is (version int16, type int16) and whose
value for a commit or abort marker is (version int16, coordinator epoch int32). Readers never hand control
records to applications; read_committed readers use the markers to end a producer's transaction.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from pipeline.records.batch import ATTRIBUTES, CONTROL_FLAG, CRC, compute_crc
from pipeline.records.encode import encode_batch

__all__ = ["ControlRecordType", "EndTransactionMarker", "end_transaction_marker_batch", "parse_control_key",
           "parse_end_transaction_marker"]

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
_CURRENT_VERSION = 0
_ATTRIBUTES = struct.Struct(">h")
_UINT32 = struct.Struct(">I")


class ControlRecordType(IntEnum):
    """The type in a control record's key."""

    ABORT = 0
    COMMIT = 1


class EndTransactionMarker(NamedTuple):
    """A commit or abort marker as read from a control record."""

    type: ControlRecordType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.type == ControlRecordType.COMMIT


def end_transaction_marker_batch(producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                                 timestamp: int, *, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """One control batch holding the commit (or abort) marker of ``producer_id``'s transaction."""
    kind = ControlRecordType.COMMIT if committed else ControlRecordType.ABORT
    batch = bytearray(encode_batch(
        [_MARKER_VALUE.pack(_CURRENT_VERSION, coordinator_epoch)], [_KEY.pack(_CURRENT_VERSION, kind)],
        timestamp=timestamp, base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch, transactional=True))
    attributes = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES)[0]
    _ATTRIBUTES.pack_into(batch, ATTRIBUTES, attributes | CONTROL_FLAG)
    _UINT32.pack_into(batch, CRC, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def parse_control_key(key: bytes | None) -> ControlRecordType | int:
    """The type in a control record's key (an int for types this code does not know, which readers skip).

    Raises ValueError for a key too short to hold one."""
    if key is None or len(key) < _KEY.size:
        raise ValueError("a control record's key holds a version and a type (4 bytes)")
    _, kind = _KEY.unpack_from(key)
    try:
        return ControlRecordType(kind)
    except ValueError:
        return kind


def parse_end_transaction_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
    """The commit or abort marker in a control record; None for a control record of another type."""
    kind = parse_control_key(key)
    if not isinstance(kind, ControlRecordType):
        return None
    if value is None or len(value) < _MARKER_VALUE.size:
        raise ValueError("an end-transaction marker's value holds a version and a coordinator epoch (6 bytes)")
    _, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return EndTransactionMarker(kind, coordinator_epoch)
