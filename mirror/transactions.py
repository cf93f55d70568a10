"""The exactly-once mirror's transactions (exactly.once=true): per source, one transactional producer into the
target, whose transactions hold the records copied, the tier-mirror audit counts of those records and the source
offsets after them, as Kafka's exactly-once source connectors keep theirs.

The source offsets live in the target cluster, committed with TxnOffsetCommit (``send_offsets_to_transaction``)
under the group ``GROUP.SOURCE``; each commit's metadata names the transactional id that wrote it, prefixed
``released:`` when it was the last commit before that process let the partition go (a rebalance, a shutdown). A
partition claimed starts at its offset in the target; one the target has none of yet (the first start in this
mode) at its offset in the source, so switching from at-least-once loses and repeats nothing.

Fencing: the transactional id is ``PREFIX.SOURCE.PROCESS`` and survives a restart, so ``init_transactions`` fences
the process's own predecessor (aborting its open transaction). A partition whose committed metadata names another
id without ``released:`` may still be written by a zombie of that process: its id is fenced first (an
InitProducerId for it aborts its open transaction and bumps its epoch), then the offset is read again. A released
partition needs no fencing: its old owner committed it for the last time and no longer reads it, so live processes
handing partitions over in a rebalance never fence each other.

An aborted transaction is not rewound in place: the mirror stops with an error and starts again (supervisord
restarts it) from the offsets committed in the target, which is where the abort left the target.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Mapping

from pipeline.client.admin import AdminClient
from pipeline.client.errors import (KafkaClientError, ProducerFencedError, TransactionAbortableError,
                                    TransactionFatalError)
from pipeline.client.producer import CallbackHandler, Producer, ProducerData
from pipeline.protocol.errors import KafkaProtocolError
from mirror.config import MirrorConfig

__all__ = ["COMMIT_ERRORS", "FENCED_ERRORS", "RELEASED", "AuditValue", "SourceTransactions", "offset_metadata",
           "writer_of"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: Prefix of the offset metadata of a partition's last commit by a process that let it go.
RELEASED = "released:"

#: What a commit raises when a newer producer with this transactional id fenced this one.
FENCED_ERRORS = (ProducerFencedError,)
#: What else a commit may raise: the transaction is aborted and the mirror restarts.
COMMIT_ERRORS = (TransactionAbortableError, TransactionFatalError, KafkaClientError, KafkaProtocolError, TimeoutError)


def offset_metadata(transactional_id: str, released: bool) -> str:
    """The metadata committed with a source offset: the writer's transactional id, marked if released."""
    return f"{RELEASED}{transactional_id}" if released else transactional_id


def writer_of(metadata: str | None) -> tuple[str | None, bool]:
    """(transactional id, released) of a committed offset's metadata; (None, True) for one no mirror wrote."""
    if not metadata:
        return None, True
    if metadata.startswith(RELEASED):
        return metadata[len(RELEASED):], True
    return metadata, False


class AuditValue:
    """An AuditCount record already encoded, produced in a transaction beside the records it counts."""

    __slots__ = ("value",)

    def __init__(self, value: bytes) -> None:
        self.value = value


class SourceTransactions:
    """One source's transactional producer, its open transaction and the offsets it committed in the target.

    ``lock`` is held by a stream thread while it hands one record to the producer and by every commit, so that a
    transaction commits exactly the records it tracked. ``owned`` are the partitions this process reads now."""

    def __init__(self, source: str, config: MirrorConfig, handler: CallbackHandler, serializer: Any,
                 target_admin: AdminClient, producer_factory: Callable[..., Producer] = Producer) -> None:
        self.source = source
        self.transactional_id = config.transactional_id(source)
        self.group = config.target_group(source)
        self.timeout_s = float(config["shutdown.timeout.s"])
        self._config = config
        self._admin = target_admin
        self._producer_factory = producer_factory
        self.producer = producer_factory({**config.transactional_producer_config(source).as_dict(),
                                          "serializer.class": serializer}, handler)
        self.lock = threading.RLock()
        self.owned: set[TopicPartition] = set()
        #: What this process committed last per partition: (offset, released).
        self.committed: dict[TopicPartition, tuple[int, bool]] = {}
        #: Records handed to the producer in the open transaction.
        self.sent = 0
        self.commits = 0

    # -- starting ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Fence this process's predecessor (the same transactional id) and open the first transaction."""
        self.producer.init_transactions(self.timeout_s)
        self.producer.begin_transaction()
        log.info("source %s: transactional id %s, offsets in the target's group %s", self.source,
                 self.transactional_id, self.group)

    def start_offsets(self, partitions: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, int | None]:
        """Where the claimed ``partitions`` start: their offsets committed in the target, after fencing any other
        process that committed one without releasing it; the source's offset (``partitions``' values) for a
        partition the target has none of."""
        committed = self._fetch(list(partitions))
        foreign = sorted({writer for writer, released in (writer_of(c.metadata) for c in committed.values())
                          if writer is not None and writer != self.transactional_id and not released})
        if foreign:
            for transactional_id in foreign:
                self.fence(transactional_id)
            committed = self._fetch(list(partitions))
        starts: dict[TopicPartition, int | None] = {}
        for tp, source_offset in partitions.items():
            found = committed.get(tp)
            starts[tp] = found.offset if found is not None else source_offset
            if found is not None:
                self.committed[tp] = (found.offset, writer_of(found.metadata)[1])
            if found is None and source_offset is not None:
                log.info("source %s: %s-%d has no offset in the target yet; starting at its offset in the source, "
                         "%d", self.source, tp[0], tp[1], source_offset)
        with self.lock:
            self.owned.update(partitions)
        return starts

    def fence(self, transactional_id: str) -> None:
        """Abort ``transactional_id``'s open transaction and bump its epoch, so that a zombie of another process
        can neither commit nor write any more (an InitProducerId for that id)."""
        log.warning("source %s: fencing transactional id %s (it committed offsets of partitions this process now "
                    "owns and never released them)", self.source, transactional_id)
        config = {**self._config.producer_config().as_dict(), "transactional.id": transactional_id,
                  "producer.type": "sync", "client.id": f"mirror-fence-{self.source}"}
        fencer = self._producer_factory(config)
        try:
            fencer.init_transactions(self.timeout_s)
        finally:
            fencer.close(self.timeout_s)

    def _fetch(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Any]:
        """The offsets committed in the target, once no transaction holds any of them pending (RequireStable)."""
        return self._admin.fetch_offsets(self.group, partitions, require_stable=True)

    # -- committing ----------------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int], audit: Iterable[tuple[bytes, bytes]], audit_topic: str,
               released: Iterable[TopicPartition] = ()) -> dict[TopicPartition, int]:
        """Commit the open transaction with ``offsets`` (the next source offset to copy per partition) and the
        audit counts, then open the next one; the offsets committed (none when nothing changed). The caller
        holds ``lock`` and flushed the producer; a failure leaves the transaction to ``abort``."""
        released = set(released)
        changed = {tp: o for tp, o in offsets.items()
                   if self.committed.get(tp) != (o, tp in released)}
        audit = list(audit)
        if not changed and not audit and not self.sent:
            return {}
        if audit:
            self.producer.send([ProducerData(audit_topic, key, [AuditValue(value)]) for key, value in audit])
        if changed:
            self.producer.send_offsets_to_transaction(
                changed, self.group,
                {tp: offset_metadata(self.transactional_id, tp in released) for tp in changed}, self.timeout_s)
        self.producer.commit_transaction(self.timeout_s)
        self.commits += 1
        self.sent = 0
        for tp, offset in changed.items():
            self.committed[tp] = (offset, tp in released)
        self.producer.begin_transaction()
        return changed

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        """``partitions`` are no longer read by this process (their last commit was made)."""
        with self.lock:
            for tp in partitions:
                self.owned.discard(tp)
                self.committed.pop(tp, None)

    def abort(self) -> None:
        """Abort the open transaction (best effort: a restart's init_transactions aborts it too)."""
        try:
            self.producer.abort_transaction(self.timeout_s)
        except (KafkaClientError, KafkaProtocolError, TimeoutError) as exc:
            log.warning("source %s: could not abort the open transaction (the next start aborts it): %s",
                        self.source, exc)

    def close_admin(self) -> None:
        """Close the client that reads the target's offsets (the producer is closed with the others)."""
        self._admin.close()

