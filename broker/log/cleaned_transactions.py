"""What the log cleaner knows of transactions while it reads a log in offset order (Kafka's
CleanedTransactionMetadata): which data batches belong to aborted transactions (dropped, and never put in
the offset map, so an aborted record cannot shadow a committed one), and which commit or abort markers no
longer have any data of their transaction left (removable once delete.retention.ms has passed).

The aborted transactions come from the log's txn indexes; a transaction whose data a pass still sees and
drops keeps its abort marker and its index entry (written to the cleaned segment's .txnindex), so a later
pass, seeing no data, is the one that may remove the marker: Kafka's two passes.
"""

from __future__ import annotations

from typing import Iterable

from broker.log.transaction_index import AbortedTxn, TransactionIndex
from pipeline.records.batch import TRANSACTIONAL_FLAG, BatchHeader
from pipeline.records.control import ControlRecordType


class CleanedTransactionMetadata:
    """The transactions a cleaning pass meets, batch by batch in offset order."""

    def __init__(self, aborted: Iterable[AbortedTxn], txn_index: TransactionIndex | None = None) -> None:
        """``aborted``: the aborted transactions of the section read; ``txn_index``: where the entries of the
        aborted transactions whose markers this pass keeps are written (the cleaned segment's), or None."""
        self._aborted = sorted(aborted, key=lambda txn: txn.first_offset)
        self._next = 0
        self._ongoing_committed: set[int] = set()
        # producer id -> [its aborted transaction, whether the pass saw one of its data batches]
        self._ongoing_aborted: dict[int, list] = {}
        self.txn_index = txn_index

    def _start_aborted_up_to(self, header: BatchHeader) -> None:
        """Start the aborted transactions begun by the end of the batch; one whose marker lies before the
        batch ended before the section read (a pass building its map from the dirty offset on)."""
        aborted = self._aborted
        last = header.base_offset + header.last_offset_delta
        while self._next < len(aborted) and aborted[self._next].first_offset <= last:
            txn = aborted[self._next]
            if txn.last_offset >= header.base_offset:
                self._ongoing_aborted[txn.producer_id] = [txn, False]
            self._next += 1

    def on_batch_read(self, header: BatchHeader) -> bool:
        """A data batch: whether it belongs to an aborted transaction (its records are dropped)."""
        self._start_aborted_up_to(header)
        if not header.attributes & TRANSACTIONAL_FLAG:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            # An emptied batch (kept for its producer's state) is no data: the marker may go.
            ongoing[1] = ongoing[1] or header.record_count > 0
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: BatchHeader, kind: ControlRecordType | int) -> bool:
        """A control batch whose record has type ``kind``: whether it is a marker whose transaction has no
        data left in the log (removable after delete.retention.ms)."""
        self._start_aborted_up_to(header)
        producer_id = header.producer_id
        if kind == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing[1]:
                if self.txn_index is not None:
                    self.txn_index.append(ongoing[0])
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False
