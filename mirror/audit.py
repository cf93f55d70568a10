"""The mirror tier of the audit: per source datacenter, topic and window of event time, the records the
target acknowledged, published as AuditCount records to the target's audit topic.

One pipeline.auditing.counting.AuditCounter per source cluster, with tier ``mirror``, the source's name as its
datacenter (so the counts line up with that datacenter's producer tier) and this mirror process as the
host. A record's event time is its timestamp. A record mirrored twice (after a restart, from the last
commit) is counted twice: duplicates show as a mirror count above the producer count of the window.
Windows are published once their end has passed and nothing of them is in flight, and all of them at
shutdown, by the retrying pipeline.auditing.publisher.AuditPublisher. An exactly-once mirror publishes nothing
itself (``transactional=True``): it takes each source's counts (``take_encoded``) and produces them in that source's
transaction, with the records they count and their source offsets, so the counts committed are exactly those of
the records committed (an aborted transaction's counts are aborted with its records). A record the target refused for good and the
mirror quarantined is counted in a quarantine record (properties.quarantined = the reason), not as mirrored.
"""

from __future__ import annotations

import socket
from collections import Counter
from typing import Any, Iterable, Sequence

from pipeline.auditing.counting import AuditCounter
from pipeline.auditing.publisher import AuditPublisher
from schemas.registry_client import SchemaRegistryClient
from schemas.registry_client_settings import NO_REGISTRY_SECURITY, RegistryClientSettings
from schemas.serde import audit_count_encoder, event_keys

__all__ = ["MIRROR_TIER", "MirrorAudit"]

MIRROR_TIER = "mirror"


class MirrorAudit:
    """Counts records sent and acknowledged per source; ``publish_closed`` / ``close`` publish the windows."""

    def __init__(self, sources: Iterable[str], *, window_ms: int, producer_config: dict[str, Any], registry_url: str,
                 topic: str, metrics: Any, registry_settings: RegistryClientSettings = NO_REGISTRY_SECURITY,
                 transactional: bool = False) -> None:
        self.host = f"mirror-{socket.gethostname()}"
        self.topic = topic
        self.counters = {name: AuditCounter(window_ms=window_ms, datacenter=name, application="mirror",
                                            tier=MIRROR_TIER) for name in sources}
        self.registry = SchemaRegistryClient(registry_url, settings=registry_settings)
        self.encoder = audit_count_encoder(self.registry, topic)
        self.metrics = metrics
        self.publisher = None if transactional else AuditPublisher(
            producer_config, self.encoder, topic, published=metrics.audit_published, failures=metrics.audit_failures)

    def start(self) -> "MirrorAudit":
        if self.publisher is None:
            # Registers the schema now: an unreachable registry fails the start, not the first commit.
            self.encoder.encode_for(self.topic, [])
        else:
            self.publisher.start()
        return self

    def take_encoded(self, source: str) -> list[tuple[bytes, bytes]]:
        """(key, value) of the AuditCount records of everything of ``source`` settled since the last take, encoded
        for the audit topic (transactional: the caller produces them in the transaction of those records)."""
        records = self.counters[source].take_counted()
        if not records:
            return []
        values = self.encoder.encode_for(self.topic, records)
        return [(record["topic"].encode(), value) for record, value in zip(records, values)]

    def sent(self, source: str, topic: str, event_times_ms: Sequence[int]) -> None:
        """Records of ``source`` ``topic`` with these event times were handed to the target: in flight."""
        if not event_times_ms:
            return
        counter = self.counters[source]
        window_ms = counter.window_ms
        low, high = min(event_times_ms), max(event_times_ms)
        if low - low % window_ms == high - high % window_ms:
            # All in one window (a fetched batch usually is): one count.
            counter.sent_all({(self.host, topic, low): len(event_times_ms)})
        else:
            counter.sent_all({(self.host, topic, t): n for t, n in Counter(event_times_ms).items()})

    def settled(self, source: str, topic: str, event_times_ms: Sequence[int], sizes: Sequence[int],
                values: Sequence[bytes | None], acknowledged: bool) -> None:
        """Records of ``source`` ``topic`` (event time, bytes, value) the target acknowledged, or that failed for
        good; the event ids of acknowledged values that are events go into the windows' sketches."""
        host = self.host
        outcomes = [(host, topic, t, size) for t, size in zip(event_times_ms, sizes)]
        ids = None
        if acknowledged:
            # Read in one pass (tombstones as empty values: no event); the sketch takes the ids' text in bulk.
            found = event_keys(values if all(values) else [value or b"" for value in values])
            ids = [None if key is None else key.event_id for key in found]
        self.counters[source].settled(outcomes, acknowledged, ids)

    def quarantined(self, source: str, topic: str, event_time_ms: int, size: int, reason: str,
                    event_id: str | None) -> None:
        """A record handed to the target and refused for good, quarantined for ``reason``: counted in a quarantine
        record of tier mirror (docs/accounting.md), no longer in flight."""
        self.counters[source].quarantined(self.host, topic, event_time_ms, size, reason, event_id, in_flight=True)

    def publish_counted(self, timeout_s: float) -> bool:
        """Publish the counts of every record acknowledged so far (open windows too: their later records add up)
        and wait until they are stored: True once they are, False when ``timeout_s`` ran out."""
        publisher = self.publisher
        if publisher is None:
            return True
        upto = 0
        for counter in self.counters.values():
            upto = publisher.publish(counter.take_counted())
        return publisher.wait_published(upto, timeout_s)

    def close(self, timeout_s: float) -> int:
        """Publish every window (records still in flight counted as ``unsettled``); the records left unpublished.
        Transactional: nothing is published (what was committed was counted in its transaction; what was not is
        mirrored and counted again after a restart)."""
        try:
            if self.publisher is None:
                return 0
            for counter in self.counters.values():
                self.publisher.publish(counter.close_windows(None))
            return self.publisher.close(timeout_s)
        finally:
            self.registry.close()
