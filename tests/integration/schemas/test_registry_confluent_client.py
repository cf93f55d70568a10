"""confluent-kafka's SchemaRegistryClient and Avro serializer against our registry process."""

from __future__ import annotations

import io
import json
import struct

import pytest
from fastavro import parse_schema, schemaless_reader
from fastavro.utils import generate_one
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas.events import load_schema, references, source_schema, subject_for
from tests.support.registry import RegistryProcess


def test_client_registers_fetches_and_sees_errors(registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    text = json.dumps(load_schema("PageViewEvent", 1))
    subject = subject_for("PageViewEvent")
    schema_id = client.register_schema(subject, Schema(text, "AVRO"))
    assert client.register_schema("other-value", Schema(text, "AVRO")) == schema_id
    fetched = SchemaRegistryClient({"url": registry.url}).get_schema(schema_id)
    assert json.loads(fetched.schema_str) == json.loads(text)
    assert client.get_latest_version(subject).schema_id == schema_id
    assert client.lookup_schema(subject, Schema(text, "AVRO")).version == 1
    assert subject in client.get_subjects()
    evolved = Schema(json.dumps(load_schema("PageViewEvent", 2)), "AVRO")
    assert client.test_compatibility(subject, evolved)
    assert client.register_schema(subject, evolved) > schema_id
    assert client.get_versions(subject) == [1, 2]
    with pytest.raises(SchemaRegistryError) as raised:
        client.get_latest_version("missing-value")
    assert raised.value.error_code == 40401


def test_avro_serializer_round_trip_with_the_wire_format(registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    writer = load_schema("SearchEvent")
    context = SerializationContext("SearchEvent", MessageField.VALUE)
    event = generate_one(parse_schema(load_schema("SearchEvent")))
    encoded = AvroSerializer(client, json.dumps(writer))(event, context)
    schema_id = client.get_latest_version(subject_for("SearchEvent")).schema_id
    assert encoded[0] == 0 and struct.unpack(">I", encoded[1:5])[0] == schema_id
    decoded = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))(encoded, context)
    assert decoded["query"] == event["query"] and decoded["header"]["server"] == event["header"]["server"]
    assert decoded == schemaless_reader(io.BytesIO(encoded[5:]), parse_schema(writer))


def test_client_registers_with_references(registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    header = references("PageViewEvent")[0]
    client.register_schema(header, Schema(json.dumps(source_schema("EventHeader")), "AVRO"))
    refs = [SchemaReference(header, header, 1)]
    text = json.dumps(source_schema("PageViewEvent"))
    schema_id = client.register_schema(subject_for("PageViewEvent"), Schema(text, "AVRO", refs))
    fetched = SchemaRegistryClient({"url": registry.url}).get_schema(schema_id)
    assert [(r.name, r.subject, r.version) for r in fetched.references] == [(header, header, 1)]
    event = generate_one(parse_schema(load_schema("PageViewEvent")))
    context = SerializationContext("PageViewEvent", MessageField.VALUE)
    serializer = AvroSerializer(client, Schema(text, "AVRO", refs), conf={"auto.register.schemas": False,
                                                                          "use.latest.version": True})
    encoded = serializer(event, context)
    assert struct.unpack(">I", encoded[1:5])[0] == schema_id
    decoded = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))(encoded, context)
    assert decoded == schemaless_reader(io.BytesIO(encoded[5:]), parse_schema(load_schema("PageViewEvent")))
