"""Publishing a tier's AuditCount records (:mod:`pipeline.auditing.counting` makes them) to the audit topic: a
thread that retries until the broker takes them.

The records are encoded by the encoder the caller gives (the AuditCount Avro schema's, registered in the schema
registry: ``schemas.serde.audit_count_encoder``), so that this client library needs nothing above the clients.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from prometheus_client import Counter

from pipeline.client import Producer, ProducerData
from pipeline.client.encoder import Encoder
from pipeline.client.errors import KafkaClientError
from pipeline.protocol.errors import KafkaProtocolError

__all__ = ["AuditPublisher", "PUBLISHER_PRODUCER_DEFAULTS"]

log = logging.getLogger(__name__)


# The publishers' producer, unless the caller says otherwise: acks=all and idempotent (a retried publish is stored
# once), each attempt bounded by a short delivery timeout since the publisher's own loop retries for ever.
PUBLISHER_PRODUCER_DEFAULTS: dict[str, Any] = {"request.required.acks": -1, "enable.idempotence": True,
                                               "request.timeout.ms": 5000, "delivery.timeout.ms": 10000}


class AuditPublisher:
    """A thread that publishes AuditCount records to the audit topic, encoded by ``encoder``, retrying what the
    broker refused; its producer settings are ``config`` over :data:`PUBLISHER_PRODUCER_DEFAULTS`."""

    def __init__(self, config: dict[str, Any], encoder: Encoder, topic: str, *,
                 published: Counter, failures: Counter, retry_backoff_s: float = 1.0) -> None:
        self.topic = topic
        self.published_total = published
        self.failures_total = failures
        self.retry_backoff_s = retry_backoff_s
        self.encoder = encoder
        self.producer = Producer({**PUBLISHER_PRODUCER_DEFAULTS, **config, "producer.type": "sync",
                                  "serializer.class": self.encoder})
        self.published = 0
        self._pending: list[dict[str, Any]] = []
        self._queue: queue.Queue[list[dict[str, Any]] | None] = queue.Queue()
        self._give_up = threading.Event()
        self._enqueued = 0
        self._published_changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="audit-publisher", daemon=True)

    def start(self) -> "AuditPublisher":
        # Encoding nothing makes a registry-backed encoder register the topic's schema now: an unreachable registry
        # fails the start, not the first publish.
        self.encoder.encode_for(self.topic, [])
        self._thread.start()
        return self

    def publish(self, records: list[dict[str, Any]]) -> int:
        """Queue ``records``; the number of records queued so far, for ``wait_published``."""
        with self._published_changed:
            if records:
                self._enqueued += len(records)
                self._queue.put(records)
            return self._enqueued

    def wait_published(self, upto: int, timeout_s: float) -> bool:
        """Wait until the first ``upto`` records queued are published (True), or ``timeout_s`` passes (False)."""
        with self._published_changed:
            return self._published_changed.wait_for(lambda: self.published >= upto, timeout_s)

    def close(self, timeout_s: float) -> int:
        """Publish what is queued, retrying for at most `timeout_s`; the number of records left unpublished."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._give_up.set()
            self._thread.join()
        left = len(self._pending) + sum(len(batch) for batch in self._queue.queue if batch)
        self.producer.close()
        return left

    def _run(self) -> None:
        closing = False
        while not (closing and not self._pending):
            try:
                item = self._queue.get(block=not self._pending and not closing)
                while True:
                    if item is None:
                        closing = True
                    else:
                        self._pending.extend(item)
                    item = self._queue.get_nowait()
            except queue.Empty:
                pass
            if not self._pending:
                continue
            try:
                self.producer.send([ProducerData(self.topic, r["topic"].encode(), [r]) for r in self._pending])
            except (KafkaClientError, KafkaProtocolError) as exc:
                self.failures_total.inc()
                log.warning("could not publish %d audit counts (will retry): %s", len(self._pending), exc)
                if self._give_up.wait(self.retry_backoff_s):
                    return
                continue
            with self._published_changed:
                self.published += len(self._pending)
                self._published_changed.notify_all()
            self.published_total.inc(len(self._pending))
            self._pending = []
