"""Avro events in the Confluent wire format between confluent-kafka and our clients, through a real
registry process and a real broker: theirs in, ours out, and the other way round; schema evolution."""

from __future__ import annotations

import io
import json
import struct
import threading
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_writer
from fastavro.utils import generate_many

from pipeline.client import Consumer, Producer, ProducerData
from pipeline.client.admin import AdminClient
from schemas.events import load_schema, subject_for
from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError
from schemas.serde import AvroDecoder, AvroEncoder, schema_id_of
from tests.support import BrokerProcess
from tests.support.clients import confluent_consume
from tests.support.registry import RegistryProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    work = tmp_path_factory.mktemp("serde-broker")
    with BrokerProcess(work / "logs", log_path=work / "broker.log") as process:
        yield process


def events(name: str, count: int, version: int | None = None) -> list[dict]:
    """`count` random valid records of schema `name`, with event ids and times as the emulators write them."""
    records = list(generate_many(parse_schema(load_schema(name, version)), count))
    for index, record in enumerate(records):
        record["header"]["eventId"] = str(uuid.UUID(int=index + 1, version=4))
        record["header"]["eventTime"] = 1_700_000_000_000 + index
    return records


def consume(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"metadata.broker.list": bootstrap, "consumer.timeout.ms": 15000,
                         "auto.offset.reset": "smallest"}, topics=[topic])
    seen = []
    try:
        for record in consumer:
            seen.append(record)
            if len(seen) == count:
                break
    finally:
        consumer.close()
    assert len(seen) == count
    return seen


def comparable(record: dict) -> str:
    """A record as JSON, datetimes and UUIDs (fastavro's logical types on read) in their plain forms."""
    def plain(value: object) -> object:
        if hasattr(value, "timestamp"):
            return int(round(value.timestamp() * 1000))
        if isinstance(value, uuid.UUID):
            return str(value)
        return value
    return json.dumps(record, sort_keys=True, default=plain)


def test_confluent_serializer_in_our_decoder_out(broker: BrokerProcess, registry: RegistryProcess) -> None:
    topic = "SearchEvent"
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=2)
    sent = events(topic, 200)
    serializer = AvroSerializer(ConfluentRegistryClient({"url": registry.url}), json.dumps(load_schema(topic)))
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    context = SerializationContext(topic, MessageField.VALUE)
    for record in sent:
        producer.produce(topic, key=record["header"]["server"].encode(), value=serializer(record, context))
    assert producer.flush(30) == 0

    client = SchemaRegistryClient(registry.url)
    decoder = AvroDecoder(client, {topic: load_schema(topic)})
    got = [decoder.decode(record.value, topic) for record in consume(broker.bootstrap, topic, len(sent))]
    assert sorted(map(comparable, got)) == sorted(map(comparable, sent))
    # One registry request for the one writer schema, however many messages.
    assert client.requests == 1


def test_our_encoder_in_confluent_deserializer_out(broker: BrokerProcess, registry: RegistryProcess) -> None:
    topic = "ProfileViewEvent"
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=3)
    sent = events(topic, 300)
    client = SchemaRegistryClient(registry.url)
    encoder = AvroEncoder(client, {topic: load_schema(topic)})
    with Producer({"metadata.broker.list": broker.bootstrap, "producer.type": "async", "request.required.acks": -1,
                   "compression.codec": "zstd", "serializer.class": encoder, "queue.time": 20}) as producer:
        for record in sent:
            producer.send(ProducerData(topic, str(record["viewedMemberId"]).encode(), [record]))
    assert producer.failed_messages == 0
    # Registered once under the topic's subject, then never asked again.
    assert client.requests == 1
    schema_id = encoder.schema_id(topic)
    assert registry.call("GET", f"/subjects/{subject_for(topic)}/versions/1")[1]["id"] == schema_id

    deserializer = AvroDeserializer(ConfluentRegistryClient({"url": registry.url}))
    context = SerializationContext(topic, MessageField.VALUE)
    received = confluent_consume(broker.bootstrap, topic, range(3), len(sent))
    assert all(schema_id_of(r.value) == schema_id for r in received)
    assert all(r.key == str(deserializer(r.value, context)["viewedMemberId"]).encode() for r in received)
    got = [deserializer(r.value, context) for r in received]
    assert sorted(map(comparable, got)) == sorted(map(comparable, sent))


def test_evolution_old_and_new_events_read_as_the_new_schema(broker: BrokerProcess,
                                                              registry: RegistryProcess) -> None:
    topic = "PageViewEvent"
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=1)
    client = SchemaRegistryClient(registry.url)
    old, new = events(topic, 50, version=1), events(topic, 50, version=2)
    for record in new:
        record["sessionId"] = "session-%s" % record["header"]["eventId"][-4:]
    v1 = AvroEncoder(client, {topic: load_schema(topic, 1)})
    v2 = AvroEncoder(client, {topic: load_schema(topic, 2)})
    config = {"metadata.broker.list": broker.bootstrap, "request.required.acks": 1}
    with Producer({**config, "serializer.class": v1}) as producer:
        producer.send(ProducerData(topic, None, old))
    with Producer({**config, "serializer.class": v2}) as producer:
        producer.send(ProducerData(topic, None, new))
    assert v1.schema_id(topic) != v2.schema_id(topic)
    assert registry.call("GET", f"/subjects/{subject_for(topic)}/versions")[1] == [1, 2]

    # A reader that knows only v2 reads both; the v1 events get v2's default for the field they lack.
    decoder = AvroDecoder(SchemaRegistryClient(registry.url), {topic: load_schema(topic, 2)})
    got = [decoder.decode(record.value, topic) for record in consume(broker.bootstrap, topic, 100)]
    assert [g["sessionId"] for g in got[:50]] == [None] * 50
    assert [g["sessionId"] for g in got[50:]] == [r["sessionId"] for r in new]
    assert [comparable({**g, "sessionId": None}) for g in got[:50]] == \
        [comparable({**r, "sessionId": None}) for r in old]
    # Without a reader schema each event reads as it was written.
    plain = AvroDecoder(SchemaRegistryClient(registry.url))
    written = [plain.decode(record.value) for record in consume(broker.bootstrap, topic, 100)]
    assert "sessionId" not in written[0] and "sessionId" in written[50]


def test_incompatible_schema_is_refused_and_nothing_is_stored(registry: RegistryProcess) -> None:
    topic = "ClickEvent"
    client = SchemaRegistryClient(registry.url)
    first = AvroEncoder(client, {topic: load_schema(topic)})
    first_id = first.schema_id(topic)
    incompatible = load_schema(topic)
    # A new field without a default: a reader with it cannot read the events already written (BACKWARD).
    incompatible["fields"].append({"name": "mandatory", "type": "string"})
    encoder = AvroEncoder(SchemaRegistryClient(registry.url), {topic: incompatible})
    with pytest.raises(SchemaRegistryError) as refused:
        encoder.encode_for(topic, [])
    assert (refused.value.status, refused.value.code) == (409, 409)
    assert registry.call("GET", f"/subjects/{subject_for(topic)}/versions")[1] == [1]
    status, body = registry.call("POST", f"/subjects/{subject_for(topic)}", {"schema": json.dumps(incompatible)})
    assert (status, body["error_code"]) == (404, 40403)
    assert registry.call("GET", f"/schemas/ids/{first_id + 1}")[0] == 404
    # Without auto-registration an unregistered schema is an error, not a registration.
    lookup_only = AvroEncoder(SchemaRegistryClient(registry.url), {"Other": load_schema(topic)}, auto_register=False)
    with pytest.raises(SchemaRegistryError) as missing:
        lookup_only.schema_id("Other")
    assert missing.value.code == 40401
    assert registry.call("GET", "/subjects")[1] == [subject_for(topic)]


def test_registry_client_asks_once_per_id_across_threads(registry: RegistryProcess) -> None:
    schema_id = SchemaRegistryClient(registry.url).register(subject_for("AdImpressionEvent"),
                                                            load_schema("AdImpressionEvent"))
    client = SchemaRegistryClient(registry.url)
    start = threading.Barrier(8)
    found = []

    def fetch() -> None:
        start.wait()
        found.append(client.schema(schema_id))

    threads = [threading.Thread(target=fetch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(found) == 8 and len({id(s) for s in found}) == 1
    assert client.requests == 1
    with pytest.raises(SchemaRegistryError) as unknown:
        client.schema(schema_id + 100)
    assert (unknown.value.status, unknown.value.code) == (404, 40403)
    # An unreachable instance is skipped for the next one in the list.
    dead = RegistryProcess(Path("/nonexistent.log")).url
    assert SchemaRegistryClient(f"{dead},{registry.url}").schema(schema_id).schema_id == schema_id


def test_decoder_resolves_schema_references(registry: RegistryProcess) -> None:
    from schemas.events import references, source_schema

    header = references("PageViewEvent")[0]
    assert registry.call("POST", f"/subjects/{header}/versions",
                         {"schema": json.dumps(source_schema("EventHeader"))})[0] == 200
    status, body = registry.call("POST", f"/subjects/{subject_for('PageViewEvent')}/versions", {
        "schema": json.dumps(source_schema("PageViewEvent")),
        "references": [{"name": header, "subject": header, "version": 1}]})
    assert status == 200
    # The registered text names EventHeader only; the decoder must fetch the reference to read it.
    record = events("PageViewEvent", 1)[0]
    record["sessionId"] = "s-1"
    body_bytes = io.BytesIO()
    schemaless_writer(body_bytes, parse_schema(load_schema("PageViewEvent")), record)
    message = struct.pack(">bI", 0, body["id"]) + body_bytes.getvalue()
    assert schema_id_of(message) == body["id"]
    client = SchemaRegistryClient(registry.url)
    assert comparable(AvroDecoder(client).decode(message)) == comparable(record)
    assert client.requests == 2
