"""The frontend emulator: N servers of one datacenter publishing Avro events at a target rate, audited.

`FrontendEmulator.run` draws events from the workload model at the rate the `RateController` sets and
hands each to one async Producer (batching, compression), keyed by member id, encoded in the Confluent
wire format with the id the registry gave the topic's schema. The producer's callback settles every
event in the `AuditCounter` as acknowledged or failed; windows that closed are published as AuditCount
records by the `AuditPublisher` thread (pipeline.auditing.publisher), retried until the broker takes them: per
(server, topic, window) the events created, acknowledged and failed (with the failed ids' sketch), as
docs/accounting.md says. An event the producer refuses at send() already is failed too, with its id. With
`created.log` set, every event created is also listed there (producers.created_log). Stopping (SIGTERM, or the duration) sends what is queued,
then publishes the counts of the windows still open.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import Any, Callable, Sequence


from pipeline.auditing.counting import AuditCounter
from pipeline.auditing.publisher import AuditPublisher
from pipeline.security.client_settings import security_settings
from pipeline.client import Producer, ProducerData
from pipeline.client.errors import KafkaClientError
from pipeline.client.encoder import Encoder
from pipeline.client.producer import CallbackHandler, ProducerBatch
from pipeline.protocol.errors import KafkaProtocolError
from producers.config import EmulatorConfig
from producers.created_log import CreatedLog
from producers.metrics import EmulatorMetrics, total
from producers.rate import RateController
from producers.workload import Event, Workload
from schemas.events import EVENT_TOPICS, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder, audit_count_encoder

__all__ = ["EmulatedEvent", "EncodedEvents", "FrontendEmulator"]

log = logging.getLogger(__name__)

# Caught up with the schedule, the emulator sleeps at least _MIN_PAUSE_S, so that at low rates a wake-up makes a
# chunk of a few events rather than one (their eventTime is when they are made; the rate over any second stays on
# target); a chunk holds at most _MAX_CHUNK_S of events at the rate, enough for one pause and the wake-up's delay.
_MIN_PAUSE_S = 0.02
_MAX_CHUNK_S = 0.05
# ... and at most this many events, so that windows close and stop is seen on time at any rate.
_MAX_CHUNK_EVENTS = 10_000
_CLOSE_EVERY_S = 0.5
_STATUS_EVERY_S = 10.0


class EmulatedEvent:
    """What the emulator hands the producer: the encoded event and what the audit needs once it is settled."""

    __slots__ = ("topic", "server", "event_time", "encoded", "sent_at", "event_id")

    def __init__(self, topic: str, server: str, event_time: int, encoded: bytes, sent_at: float,
                 event_id: str | None = None) -> None:
        self.topic = topic
        self.server = server
        self.event_time = event_time
        self.encoded = encoded
        self.sent_at = sent_at
        self.event_id = event_id


class EncodedEvents(Encoder):
    """The producer's encoder for EmulatedEvents: they were encoded already, a topic's at a time."""

    def encode(self, message: EmulatedEvent) -> bytes:
        return message.encoded

    def encode_for(self, topic: str, messages: Sequence[EmulatedEvent]) -> list:
        return [m.encoded for m in messages]


class _Settler(CallbackHandler):
    """Settles each sent batch's events in the audit and the metrics (on the producer's sender thread)."""

    def __init__(self, audit: AuditCounter, metrics: EmulatorMetrics) -> None:
        self.audit = audit
        self.metrics = metrics

    def after_send(self, batch: ProducerBatch, result: Any) -> None:
        settle(batch.messages, not isinstance(result, BaseException), self.audit, self.metrics)


def settle(events: Sequence[EmulatedEvent], acknowledged: bool, audit: AuditCounter, metrics: EmulatorMetrics) -> None:
    """Count `events` (one topic's) as acknowledged or failed in the audit and the metrics."""
    audit.settled([(e.server, e.topic, e.event_time, len(e.encoded)) for e in events], acknowledged,
                  _id_bytes([e.event_id for e in events]))
    if not events:
        return
    topic = events[0].topic
    if acknowledged:
        metrics.acknowledged.labels(topic).inc(len(events))
        metrics.bytes.labels(topic).inc(sum(len(e.encoded) for e in events))
        metrics.latency.observe(time.monotonic() - min(e.sent_at for e in events))
    else:
        metrics.failed.labels(topic).inc(len(events))


def _id_bytes(event_ids: list[str | None]) -> list[str | bytes | None]:
    """The events' ids as the 16 bytes the audit's sketches take, converted all at once (any that is not a
    canonical UUID text, or None, as it is)."""
    try:
        raw = bytes.fromhex("".join(event_ids).replace("-", ""))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return list(event_ids)
    if len(raw) != 16 * len(event_ids):
        return list(event_ids)
    return [raw[i:i + 16] for i in range(0, len(raw), 16)]


class FrontendEmulator:
    """N emulated frontend servers of one datacenter; `run(stop)` publishes until `stop` or the duration."""

    def __init__(self, config: EmulatorConfig, metrics: EmulatorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or EmulatorMetrics()
        self.metrics.target_rate.set(config["rate"])
        self.workload = Workload(config["datacenter"], config["servers"], seed=config["seed"],
                                 members=config["members"], zipf_exponent=config["zipf.exponent"],
                                 service=config["service"], metrics_interval_ms=config["system.metrics.interval.ms"])
        self.audit = AuditCounter(window_ms=config["audit.window.ms"], datacenter=config["datacenter"],
                                  application=config["service"])
        self.registry = SchemaRegistryClient.from_config(config)
        self.encoder = AvroEncoder(self.registry, {topic: load_schema(name) for topic, name in EVENT_TOPICS.items()})
        self.sent = 0
        self.send_errors = 0
        self.skipped = 0
        self.elapsed_s = 0.0
        self._created_log: CreatedLog | None = None
        # The audit windows close, and the created log is written out, this often (at least once a window).
        self._close_every_s = min(_CLOSE_EVERY_S, config["audit.window.ms"] / 1000)

    def run(self, stop: threading.Event) -> None:
        """Publish until `stop` is set or the duration passed; then flush, publish the open windows, close."""
        config = self.config
        for topic in EVENT_TOPICS:
            self.encoder.writer_for(topic)
        if config["created.log"]:
            self._created_log = CreatedLog(config["created.log"])
        producer_config = config.producer_config()
        publisher = AuditPublisher({k: v for k, v in producer_config.items()
                                    if k in ("metadata.broker.list", "zookeeper.connect", "client.id")}
                                   | security_settings(config)
                                   | {"request.required.acks": -1, "compression.codec": "none"},
                                   audit_count_encoder(self.registry, config["audit.topic"]), config["audit.topic"],
                                   published=self.metrics.audit_published,
                                   failures=self.metrics.audit_failures).start()
        producer = Producer({**producer_config, "serializer.class": EncodedEvents()}, _Settler(self.audit, self.metrics))
        log.info("emulating %d %s servers in %s at %.0f events/s%s", config["servers"], config["service"],
                 config["datacenter"], config["rate"],
                 f" for {config['duration.s']:.0f} s" if config["duration.s"] is not None else "")
        try:
            self._publish(producer, publisher, stop)
        finally:
            try:
                producer.close(config["shutdown.timeout.s"])
            except TimeoutError as exc:
                log.error("%s", exc)
            finally:
                publisher.publish(self.audit.close_windows(None))
                left = publisher.close(config["shutdown.timeout.s"])
                if left:
                    log.error("%d audit counts could not be published before shutdown", left)
                if self._created_log is not None:
                    self._created_log.close()
                self.registry.close()
        log.info("created %d events in %.1f s (%.0f events/s; %d acknowledged, %d failed, %d skipped behind "
                 "schedule); %d audit counts published%s", self.sent, self.elapsed_s,
                 self.sent / self.elapsed_s if self.elapsed_s else 0.0, total(self.metrics.acknowledged),
                 total(self.metrics.failed), self.skipped, publisher.published,
                 f"; every id in {self._created_log.path}" if self._created_log is not None else "")
        if self.skipped:
            log.warning("cannot keep up: %.0f events/s of the %.0f asked for over the run (%d events behind schedule "
                        "dropped)", self.sent / self.elapsed_s, config["rate"], self.skipped)

    def _publish(self, producer: Producer, publisher: AuditPublisher, stop: threading.Event) -> None:
        config = self.config
        start = time.monotonic()
        end = None if config["duration.s"] is None else start + config["duration.s"]
        rate = RateController(config["rate"], start)
        chunk = max(1, min(_MAX_CHUNK_EVENTS, math.ceil(config["rate"] * _MAX_CHUNK_S)))
        audit, workload = self.audit, self.workload
        send = producer.send
        encode_for = self.encoder.encode_for
        close_every_s = self._close_every_s
        created_log = self._created_log
        next_close = start + close_every_s
        status_at, status_sent, status_skipped = start + _STATUS_EVERY_S, 0, 0
        resume_at = start
        while not stop.is_set():
            now = time.monotonic()
            if end is not None and now >= end:
                break
            if now >= next_close:
                if created_log is not None:
                    created_log.flush()
                publisher.publish(audit.close_windows(int(time.time() * 1000), config["audit.settle.ms"]))
                next_close = now + close_every_s
            if now >= status_at:
                self._report(now - status_at + _STATUS_EVERY_S, self.sent - status_sent, rate.skipped - status_skipped)
                status_at, status_sent, status_skipped = now + _STATUS_EVERY_S, self.sent, rate.skipped
            due = rate.due(now)
            if due == 0:
                stop.wait(max(0.0, min(max(rate.next_due(), resume_at), next_close, end or next_close) - now))
                continue
            resume_at = now + _MIN_PAUSE_S
            events = workload.next_events(int(time.time() * 1000), min(due, chunk))
            self._send(events, send, encode_for)
            self.sent += len(events)
            rate.emitted_now(len(events))
            self._count_skipped(rate)
        self.elapsed_s = time.monotonic() - start
        rate.drop_backlog(start + self.elapsed_s)
        self._count_skipped(rate)

    def _send(self, events: list[Event], send: Callable[[ProducerData], Any],
              encode_for: Callable[[str, list[dict]], list[bytes]]) -> None:
        """Hand ``events`` to the producer, a topic's at a time, one ProducerData per key (in their order); each is
        counted by the audit and timestamped under its own eventTime, the time the tiers downstream count it under
        (the audit service and the ETL read it from the event, the mirror from the record's timestamp). A
        SystemMetricsEvent's is its due time, which may lie in the window before the one of the moment it is
        sent."""
        audit, metrics = self.audit, self.metrics
        by_topic: dict[str, list[Event]] = {}
        for event in events:
            group = by_topic.get(event.topic)
            if group is None:
                by_topic[event.topic] = [event]
            else:
                group.append(event)
        headers = [e.value["header"] for e in events]
        # In flight before the producer can call back about any of them.
        audit.sent_all(collections.Counter(zip([e.server for e in events], [e.topic for e in events],
                                               [h["eventTime"] for h in headers])))
        if self._created_log is not None:
            self._created_log.add((h["eventId"], e.topic, h["eventTime"]) for e, h in zip(events, headers))
        sent_at = time.monotonic()
        for topic, group in by_topic.items():
            values = encode_for(topic, [e.value for e in group])
            metrics.sent.labels(topic).inc(len(group))
            by_key: dict[bytes, list[EmulatedEvent]] = {}
            for event, value in zip(group, values):
                header = event.value["header"]
                emitted = EmulatedEvent(topic, event.server, header["eventTime"], value, sent_at, header["eventId"])
                same_key = by_key.get(event.key)
                if same_key is None:
                    by_key[event.key] = [emitted]
                else:
                    same_key.append(emitted)
            for key, emitted_events in by_key.items():
                try:
                    send(ProducerData(topic, key, emitted_events, timestamps=[e.event_time for e in emitted_events]))
                except (KafkaClientError, KafkaProtocolError) as exc:
                    settle(emitted_events, False, audit, metrics)
                    self.send_errors += 1
                    if self.send_errors in (1, 10, 100) or self.send_errors % 1000 == 0:
                        log.warning("send failed (%d so far): %s", self.send_errors, exc)

    def _count_skipped(self, rate: RateController) -> None:
        if rate.skipped > self.skipped:
            self.metrics.skipped.inc(rate.skipped - self.skipped)
            self.skipped = rate.skipped

    def _report(self, interval_s: float, sent: int, skipped: int) -> None:
        achieved = sent / interval_s
        target = self.config["rate"]
        if skipped or achieved < 0.9 * target:
            log.warning("cannot keep up: %.0f events/s in the last %.0f s, target %.0f (%d events behind schedule "
                        "dropped)", achieved, interval_s, target, skipped)
        else:
            log.info("%.0f events/s (target %.0f), %d in flight", achieved, target, self.audit.in_flight())
