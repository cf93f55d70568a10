"""Reading one window's events back from a cluster: where the sketches cannot name a difference (too large), to
count the copies of the events named duplicated at the datacenter tier (:func:`held_copies`: duplicated, or created by
no producer the audit hears from?), and for ``python -m audit trace``.

The records of our event topics carry their event time as their timestamp (the emulators set it, the mirror
keeps it), so ListOffsets by timestamp finds where a window starts in each partition; the scan reads on until
the records' timestamps pass the window's end by ``slack_ms`` (events appended later than that with an older
event time are not seen -- the audit's own counting, which reads everything, does see them).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, NamedTuple

from pipeline.auditing.sketch import EventSketch, SketchError
from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster
from pipeline.client.isolation import READ_COMMITTED
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from schemas.serde import event_key

__all__ = ["Found", "held_copies", "multiplicities", "scan_window"]


class Found(NamedTuple):
    """One event as a cluster holds it."""

    event_id: str
    datacenter: str
    event_time: int
    topic: str
    partition: int
    offset: int


def scan_window(cluster: Cluster, topic: str, start_ms: int, end_ms: int, slack_ms: int = 60_000,
                datacenter: str | None = None, timeout_s: float = 30.0) -> list[Found]:
    """Every event of ``topic`` (of ``datacenter``, if given) whose event time lies in [start_ms, end_ms)."""
    admin = AdminClient(cluster)
    partitions = cluster.partitions_for(topic)
    starts = admin.list_offsets(topic, partitions, timestamp=max(0, start_ms - slack_ms))
    ends = admin.list_offsets(topic, partitions, isolation_level=READ_COMMITTED)
    found = []
    for partition in partitions:
        offset, end = starts.get(partition), ends.get(partition)
        if offset is None or end is None or offset >= end:
            continue
        host, port = cluster.brokers()[cluster.leader(topic, partition)]
        with SimpleConsumer(host, port, timeout=timeout_s, security=cluster.security,
                            isolation_level=READ_COMMITTED) as consumer:
            while offset < end:
                records = list(consumer.fetch(FetchRequest(topic, partition, offset, 4 << 20)))
                if not records:
                    break
                past = False
                for record in records:
                    if record.offset < offset:
                        continue
                    key = event_key(record.value) if record.value else None
                    if key is not None and start_ms <= key.event_time < end_ms and (
                            datacenter is None or key.datacenter == datacenter):
                        found.append(Found(key.event_id, key.datacenter, key.event_time, topic, partition,
                                           record.offset))
                    past = past or record.timestamp >= end_ms + slack_ms
                offset = records[-1].offset + 1
                if past:
                    break
    return found


def multiplicities(found: list[Found]) -> Counter:
    """Event id -> copies held."""
    return Counter(f.event_id for f in found)


def held_copies(found: list[Found], counted: EventSketch, ids: Iterable[str]) -> dict[str, int]:
    """The copies of each of ``ids`` a cluster holds as the audit counted them there (``counted``: the sketch of the
    window's events its reader counted): the copies ``found`` by a scan, corrected by what the scan did not see or
    saw besides (appended after the scan's horizon, deleted by retention since, not counted yet) when the sketches
    name that; {} when they cannot (the scan is too far off: nothing can be told)."""
    scanned = EventSketch(counted.cells_per_table)
    try:
        scanned.add([f.event_id for f in found])
        difference = (counted - scanned).decode()
    except (SketchError, ValueError):
        return {}
    if not difference.complete:
        return {}
    copies = multiplicities(found)
    return {event: copies[event] + difference.counts.get(event, 0) for event in ids}
