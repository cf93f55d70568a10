"""Counting for every tier of the audit (the paper's section 5, and docs/accounting.md): what each host created,
acknowledged, failed and quarantined, per topic and window of event time, and the thread that publishes those counts.

Every event is counted under its server, its topic and the fixed window its `header.eventTime` falls
in: in flight when handed to the producer, then acknowledged (with its encoded size) or failed for good. A window
closes once the clock has passed its end and none of its events is still in flight, or, with a settle time, once
it ended that long ago even with events still in flight (a broker outage the producer rides out for up to its
delivery timeout must not make the window's count late); `close_windows` then returns one AuditCount record per
(server, topic, window): `count`/`bytes`/`sketch` the acknowledged events (the sketch,
:mod:`pipeline.auditing.sketch`, once the tier knows its events' ids), and in `properties` the events `created`,
the `failed` ones and their `failedBytes` apart, never as acknowledged, with `failedSketch` (base64 of the failed
ids' sketch) when any failed with a known id, and `unsettled`, the change in the events still in flight. A window closed with events in flight
stays counted: each later pass that saw some of them settle returns another record of what changed since (the
records of a window add up, `unsettled` included, so their sum says how many are still in flight: while it is not
zero the audit holds the producer tier of the window pending).
A record set aside for good (`quarantined`, e.g. one the mirror's target refuses) is counted in a quarantine
record of its own per (server, topic, window, reason): `count`/`sketch` the quarantined records with an event
id, `properties.quarantined` the reason, `properties.withoutId` those without an id.
:mod:`pipeline.auditing.publisher` sends those records to the audit topic. The frontend emulators count as tier
`producer`, the mirror as tier `mirror`.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from typing import Any, Mapping, Sequence

from pipeline.auditing.latency import LatencyBuckets
from pipeline.auditing.sketch import EventSketch

__all__ = ["AuditCounter", "PRODUCER_TIER", "quarantine_record"]

PRODUCER_TIER = "producer"


class _Window:
    __slots__ = ("in_flight", "count", "bytes", "failed", "failed_bytes", "sketch", "failed_sketch", "latency",
                 "created", "reported_in_flight", "reported")

    def __init__(self) -> None:
        self.in_flight = self.count = self.bytes = self.failed = self.failed_bytes = 0
        #: Events handed to the producer since the window's last record, and the events in flight that record said.
        self.created = self.reported_in_flight = 0
        #: Whether a record of the window was returned already (then only what changes is).
        self.reported = False
        #: The acknowledged events' ids, once ids are given (pipeline.auditing.sketch).
        self.sketch: EventSketch | None = None
        #: The ids of the events that failed for good, once ids are given.
        self.failed_sketch: EventSketch | None = None
        #: How long after its event time each acknowledged event was acknowledged (pipeline.auditing.latency).
        self.latency = LatencyBuckets()


class _Settled:
    """The outcomes of one window in a call of ``settled``: how many, their bytes, latencies and ids."""

    __slots__ = ("count", "bytes", "latencies", "ids")

    def __init__(self) -> None:
        self.count = self.bytes = 0
        self.latencies: list[float] = []
        self.ids: list[str | bytes] = []


class _Quarantined:
    """The records of one (server, topic, window, reason) set aside for good."""

    __slots__ = ("count", "bytes", "without_id", "sketch")

    def __init__(self) -> None:
        self.count = self.bytes = self.without_id = 0
        self.sketch: EventSketch | None = None


def quarantine_record(*, tier: str, topic: str, window_start: int, window_ms: int, host: str, datacenter: str,
                      application: str, reason: str, count: int, size: int, without_id: int,
                      sketch: EventSketch | None) -> dict[str, Any]:
    """The AuditCount record naming quarantined records as docs/accounting.md says: ``count``/``sketch`` those with
    an event id, ``properties.quarantined`` the reason category, ``properties.withoutId`` those without an id."""
    return {"topic": topic, "tier": tier, "windowStart": window_start, "windowEnd": window_start + window_ms,
            "host": host, "datacenter": datacenter, "application": application, "count": count, "bytes": size,
            "sketch": None if sketch is None else sketch.to_bytes(),
            "properties": {"quarantined": reason, "withoutId": str(without_id), "recordId": uuid.uuid4().hex,
                           "latency": LatencyBuckets().to_text()}}


class AuditCounter:
    """Counts per (server, topic, window); safe to call from the sending thread and the acknowledging one."""

    def __init__(self, *, window_ms: int, datacenter: str, application: str, tier: str = PRODUCER_TIER) -> None:
        if window_ms <= 0:
            raise ValueError(f"the audit window must be positive, got {window_ms} ms")
        self.window_ms = window_ms
        self.datacenter = datacenter
        self.application = application
        self.tier = tier
        self._windows: dict[tuple[str, str, int], _Window] = {}
        self._quarantined: dict[tuple[str, str, int, str], _Quarantined] = {}
        self._lock = threading.Lock()

    def window_start(self, event_time_ms: int) -> int:
        return event_time_ms - event_time_ms % self.window_ms

    def sent(self, server: str, topic: str, event_time_ms: int, n: int = 1) -> None:
        """`n` events were handed to the producer: in flight until acknowledged or failed."""
        self.sent_all({(server, topic, event_time_ms): n})

    def sent_all(self, counts: Mapping[tuple[str, str, int], int]) -> None:
        """Events handed to the producer, `counts[(server, topic, event time)]` of each."""
        window_ms = self.window_ms
        with self._lock:
            windows = self._windows
            for (server, topic, event_time_ms), n in counts.items():
                start = event_time_ms - event_time_ms % window_ms
                window = windows.get((server, topic, start))
                if window is None:
                    window = windows[(server, topic, start)] = _Window()
                window.in_flight += n
                window.created += n

    def settled(self, outcomes: list[tuple[str, str, int, int]], acknowledged: bool,
                event_ids: Sequence[str | bytes | None] | None = None) -> None:
        """Events (server, topic, event time, encoded bytes) the broker acknowledged, or that failed for good;
        ``event_ids`` (one per outcome, None where unknown) go into the windows' sketches: the acknowledged ones'
        or the failed ones'. Grouped by window first (a batch's events mostly share one), the lock held only to
        add each window's sums."""
        window_ms = self.window_ms
        now_s = time.time()
        groups: dict[tuple[str, str, int], _Settled] = {}
        last_key: tuple[str, str, int] | None = None
        group = _Settled()
        for n, (server, topic, event_time_ms, size) in enumerate(outcomes):
            key = (server, topic, event_time_ms - event_time_ms % window_ms)
            if key != last_key:
                last_key = key
                group = groups.get(key)  # type: ignore[assignment]
                if group is None:
                    group = groups[key] = _Settled()
            group.count += 1
            group.bytes += size
            if acknowledged:
                group.latencies.append(now_s - event_time_ms / 1000)
            if event_ids is not None and event_ids[n] is not None:
                group.ids.append(event_ids[n])  # type: ignore[arg-type]
        with self._lock:
            windows = self._windows
            for key, group in groups.items():
                window = windows[key]
                window.in_flight -= group.count
                if acknowledged:
                    window.count += group.count
                    window.bytes += group.bytes
                    window.latency.add_all(group.latencies)
                    if group.ids:
                        if window.sketch is None:
                            window.sketch = EventSketch()
                        window.sketch.add(group.ids)
                else:
                    window.failed += group.count
                    window.failed_bytes += group.bytes
                    if group.ids:
                        if window.failed_sketch is None:
                            window.failed_sketch = EventSketch()
                        window.failed_sketch.add(group.ids)

    def quarantined(self, server: str, topic: str, event_time_ms: int, size: int, reason: str,
                    event_id: str | bytes | None, *, in_flight: bool = False) -> None:
        """A record set aside for good for ``reason``, with its event id if known; ``in_flight``: it was ``sent``
        and is settled by this (neither acknowledged nor failed)."""
        start = event_time_ms - event_time_ms % self.window_ms
        key = (server, topic, start, reason)
        with self._lock:
            if in_flight:
                self._windows[(server, topic, start)].in_flight -= 1
            window = self._quarantined.get(key)
            if window is None:
                window = self._quarantined[key] = _Quarantined()
            window.bytes += size
            if event_id is None:
                window.without_id += 1
            else:
                window.count += 1
                if window.sketch is None:
                    window.sketch = EventSketch()
                window.sketch.add([event_id])

    def in_flight(self) -> int:
        with self._lock:
            return sum(w.in_flight for w in self._windows.values())

    def take_counted(self) -> list[dict[str, Any]]:
        """AuditCount records of everything settled so far in every window, open ones too, their counts then
        started again from zero (a window's records add up): for a tier that must publish what it counted
        before it may say so elsewhere (the mirror, before committing source offsets)."""
        taken = []
        with self._lock:
            for key, window in list(self._windows.items()):
                if window.count or window.failed:
                    server, topic, start = key
                    record = self._record(server, topic, start, window)
                    record["properties"].pop("unsettled", None)
                    taken.append(record)
                    fresh = _Window()
                    fresh.in_flight = fresh.reported_in_flight = window.in_flight
                    self._windows[key] = window = fresh
                if not window.in_flight:
                    del self._windows[key]
            taken.extend(self._take_quarantined(None))
        taken.sort(key=lambda r: (r["windowStart"], r["host"], r["topic"]))
        return taken

    def close_windows(self, now_ms: int | None = None, settle_ms: int | None = None) -> list[dict[str, Any]]:
        """AuditCount records of the windows that ended by `now_ms` with nothing in flight, or (``settle_ms`` given)
        that ended ``settle_ms`` before it whatever is in flight, and of what changed in windows closed before with
        events in flight; a window is removed from the counter once nothing of it is in flight. `now_ms` None closes
        every window (at shutdown, after the producer settled what it could)."""
        closed = []
        with self._lock:
            for key, window in list(self._windows.items()):
                server, topic, start = key
                end = start + self.window_ms
                if now_ms is not None and end > now_ms:
                    continue
                settled_late = settle_ms is not None and now_ms is not None and end + settle_ms <= now_ms
                if window.in_flight and not (window.reported or settled_late or now_ms is None):
                    continue
                if window.reported and not (window.count or window.failed or window.created
                                            or window.in_flight != window.reported_in_flight):
                    continue
                closed.append(self._record(server, topic, start, window))
                if window.in_flight:
                    carried = self._windows[key] = _Window()
                    carried.in_flight = carried.reported_in_flight = window.in_flight
                    carried.reported = True
                else:
                    del self._windows[key]
            closed.extend(self._take_quarantined(now_ms))
        closed.sort(key=lambda r: (r["windowStart"], r["host"], r["topic"]))
        return closed

    def _take_quarantined(self, now_ms: int | None) -> list[dict[str, Any]]:
        """Quarantine records of the windows that ended by ``now_ms`` (None: all), removed (under the lock)."""
        taken = []
        for key, window in list(self._quarantined.items()):
            server, topic, start, reason = key
            if now_ms is not None and start + self.window_ms > now_ms:
                continue
            del self._quarantined[key]
            taken.append(quarantine_record(
                tier=self.tier, topic=topic, window_start=start, window_ms=self.window_ms, host=server,
                datacenter=self.datacenter, application=self.application, reason=reason, count=window.count,
                size=window.bytes, without_id=window.without_id, sketch=window.sketch))
        return taken

    def _record(self, server: str, topic: str, start: int, window: _Window) -> dict[str, Any]:
        # recordId tells copies of this record (a retried publish, a mirrored audit topic) from another host's
        # record that happens to say the same.
        properties = {"created": str(window.created), "failed": str(window.failed),
                      "failedBytes": str(window.failed_bytes), "recordId": uuid.uuid4().hex,
                      "latency": window.latency.to_text()}
        if window.failed_sketch is not None:
            properties["failedSketch"] = base64.b64encode(window.failed_sketch.to_bytes()).decode("ascii")
        if window.in_flight != window.reported_in_flight:
            properties["unsettled"] = str(window.in_flight - window.reported_in_flight)
        return {"topic": topic, "tier": self.tier, "windowStart": start, "windowEnd": start + self.window_ms,
                "host": server, "datacenter": self.datacenter, "application": self.application,
                "count": window.count, "bytes": window.bytes,
                "sketch": None if window.sketch is None else window.sketch.to_bytes(), "properties": properties}
