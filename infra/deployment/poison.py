"""Poison records for ``chaos poison-record``: records a datacenter cluster accepts and the ETL cannot load.

:func:`poison_records` makes one of each kind a user's mistake or a foreign producer writes into an event topic:
a stray line of text (what ``kcat -P -t TOPIC`` of a typed line stores), a null value under a key, and an event
of the topic written with a schema id the registry does not have (an event id of its own in its header, so that
the audit can name it). :func:`write` stores them with our producer (acks=all) and says where each went;
:func:`mirrored` tells when the mirror's committed offsets in the datacenter have passed them.
"""

from __future__ import annotations

import io
import struct
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from fastavro import schemaless_reader, schemaless_writer
from kazoo.exceptions import NoNodeError

from infra.deployment import clusters
from pipeline.client import CallbackHandler, FetchRequest, Producer, ProducerData, SimpleConsumer
from pipeline.client.sender import ProducerBatch, ProduceResult
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity
from pipeline.zk import layout
from pipeline.zk.client import connect
from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError
from schemas.serde import MAGIC_BYTE, schema_id_of

__all__ = ["PlacedRecord", "PoisonError", "PoisonRecord", "UNKNOWN_SCHEMA_ID", "latest_value", "mirrored",
           "poison_records", "unknown_schema_value", "write"]

# The registry hands out ids from 1 up: this one is never reached.
UNKNOWN_SCHEMA_ID = 2**31 - 1
STRAY_LINE = b"a stray line typed into the topic by chaos poison-record: not an event"
NULL_VALUE_KEY = b"chaos-poison-record"
_PREFIX = struct.Struct(">bI")


class PoisonError(RuntimeError):
    """The poison records could not be made or written (the message says why)."""


@dataclass(frozen=True)
class PoisonRecord:
    """One poison record: what it is, its key and value, its event id (None: it has none), and the reason the
    ETL's quarantine gives (docs/accounting.md's reason categories)."""

    kind: str
    key: bytes | None
    value: bytes | None
    event_id: str | None
    reason: str


@dataclass(frozen=True)
class PlacedRecord:
    """A poison record and where the cluster stored it."""

    record: PoisonRecord
    partition: int
    offset: int


def unknown_schema_value(sample: bytes, registry: SchemaRegistryClient, schema_id: int, event_id: str,
                         event_time_ms: int) -> bytes:
    """An event like ``sample`` (a value of the topic in the Confluent wire format) with ``event_id`` and
    ``event_time_ms`` in its header, written under ``schema_id`` instead of its own writer schema's id."""
    writer = registry.schema(schema_id_of(sample)).parsed
    stream = io.BytesIO(sample)
    stream.seek(_PREFIX.size)
    event = schemaless_reader(stream, writer, None)
    event["header"] = {**event["header"], "eventId": event_id, "eventTime": event_time_ms}
    out = io.BytesIO()
    out.write(_PREFIX.pack(MAGIC_BYTE, schema_id))
    schemaless_writer(out, writer, event)
    return out.getvalue()


def poison_records(sample: bytes, registry: SchemaRegistryClient, now_ms: int) -> list[PoisonRecord]:
    """One poison record of each kind, the last made from ``sample`` (an event of the topic)."""
    event_id = str(uuid.uuid4())
    return [
        PoisonRecord("a stray line of text", None, STRAY_LINE, None, "not in the Confluent wire format"),
        PoisonRecord("a null value", NULL_VALUE_KEY, None, None, "null value"),
        PoisonRecord(f"an event written with schema id {UNKNOWN_SCHEMA_ID}, which the registry does not have",
                     None, unknown_schema_value(sample, registry, UNKNOWN_SCHEMA_ID, event_id, now_ms), event_id,
                     "unknown schema id"),
    ]


def check_unknown(registry: SchemaRegistryClient, schema_id: int = UNKNOWN_SCHEMA_ID) -> None:
    """PoisonError unless the registry answers that it has no schema ``schema_id``."""
    try:
        registry.schema(schema_id)
    except SchemaRegistryError as exc:
        if exc.status == 404:
            return
        raise PoisonError(f"cannot ask the registry about schema id {schema_id}: {exc}") from None
    raise PoisonError(f"the registry has a schema with id {schema_id}: a record written with it is not poison")


def latest_value(zookeeper: str, topic: str, security: ClientSecurity = PLAINTEXT_SECURITY) -> bytes:
    """The value of the newest record of ``topic`` in the cluster under ``zookeeper`` (PoisonError: none yet)."""
    with clusters.admin(zookeeper, security=security) as client:
        addresses = client.cluster.brokers()
        for partition, end in sorted(client.list_offsets(topic).items()):
            if not end:
                continue
            host, port = addresses[client.cluster.leader(topic, partition)]
            with SimpleConsumer(host, port, client_id=clusters.CLIENT_ID, security=security) as consumer:
                for message in consumer.fetch(FetchRequest(topic, partition, end - 1, 1 << 20)):
                    if message.offset == end - 1 and message.value:
                        return bytes(message.value)
    raise PoisonError(f"{topic} holds no event yet to make the poison records from")


class _Placement(CallbackHandler):
    """The outcome of each batch (of one record each), in the order they came."""

    def __init__(self) -> None:
        self.results: list[ProduceResult | BaseException] = []
        self._changed = threading.Condition()

    def after_send(self, batch: ProducerBatch, result: ProduceResult | BaseException) -> None:
        with self._changed:
            self.results.append(result)
            self._changed.notify_all()

    def wait(self, count: int, timeout_s: float) -> ProduceResult | BaseException:
        """The outcome of the ``count``-th batch, once it came (TimeoutError after ``timeout_s``)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.results) >= count, timeout_s):
                raise TimeoutError(f"no answer within {timeout_s:.0f}s")
            return self.results[count - 1]


def write(zookeeper: str, topic: str, records: Iterable[PoisonRecord], timeout_s: float = 60.0,
          security_settings: Mapping[str, Any] | None = None) -> list[PlacedRecord]:
    """Store ``records`` in ``topic`` of the cluster under ``zookeeper``, one at a time, acknowledged by every
    in-sync replica; where each went. PoisonError when one is refused or not answered within ``timeout_s``."""
    placement = _Placement()
    producer = Producer({"zookeeper.connect": zookeeper, "producer.type": "async", "request.required.acks": -1,
                         "client.id": "chaos-poison-record", "batch.size": 1, "queue.time": 0,
                         **(security_settings or {})},
                        callback_handler=placement)
    placed = []
    try:
        for count, record in enumerate(records, 1):
            producer.send(ProducerData(topic, record.key, [record.value]))
            try:
                result = placement.wait(count, timeout_s)
            except TimeoutError as exc:
                raise PoisonError(f"{topic} did not store {record.kind}: {exc}") from None
            if not isinstance(result, ProduceResult):
                raise PoisonError(f"{topic} refused {record.kind}: {result}")
            placed.append(PlacedRecord(record, result.partition, result.base_offset))
    finally:
        producer.close()
    return placed


def mirrored(zookeeper: str, group: str, topic: str, placed: Iterable[PlacedRecord]) -> bool:
    """Whether ``group`` (the mirror's) has committed past every one of ``placed`` in ``topic`` of the cluster
    under ``zookeeper``: the mirror commits a source offset only once the offline cluster acknowledged it."""
    client = connect(zookeeper, timeout_s=10.0)
    try:
        for record in placed:
            try:
                data: Any = client.get(layout.offset_path(group, topic, record.partition))[0]
            except NoNodeError:
                return False
            if layout.parse_offset(data) <= record.offset:
                return False
        return True
    finally:
        client.stop()
        client.close()
