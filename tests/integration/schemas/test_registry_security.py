"""The registry with BASIC authentication over HTTPS (our CA): who may do what, what a client without the CA's
trust or without a login gets, and that our client and confluent-kafka's (SchemaRegistryClient, AvroSerializer)
work with Confluent's settings."""

from __future__ import annotations

import json
import ssl
import struct
import urllib.error
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentError
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema
from fastavro.utils import generate_one

from infra.deployment.certificates import CertificateAuthority
from schemas.events import load_schema, subject_for
from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError
from schemas.registry_client_settings import RegistryClientSettings
from tests.support.http_security import HttpSecurityFiles, http_security_files
from tests.support.registry import RegistryProcess, request

SCHEMA = json.dumps(load_schema("PageViewEvent", 1))


@pytest.fixture
def secured(tmp_path: Path) -> HttpSecurityFiles:
    return http_security_files(tmp_path / "security")


@pytest.fixture
def registry(tmp_path: Path, secured: HttpSecurityFiles) -> Iterator[RegistryProcess]:
    process = RegistryProcess(tmp_path / "registry.log", data_dir=tmp_path / "data",
                              extra_args=tuple(secured.settings()), auth=secured.logins["reader"],
                              ca_file=secured.ca_file).start()
    yield process
    assert process.stop() == 0


def test_roles_decide_and_anonymous_gets_the_challenge(registry: RegistryProcess, secured: HttpSecurityFiles) -> None:
    logins = secured.logins
    status, body = request(registry.url + "/subjects", context=registry.context)
    assert (status, body["error_code"]) == (401, 40101)
    assert registry.call("GET", "/subjects", auth=(logins["reader"][0], "wrong"))[0] == 401
    assert registry.call("GET", "/subjects") == (200, [])
    status, body = registry.call("POST", "/subjects/s-value/versions", {"schema": SCHEMA})
    assert (status, body["error_code"]) == (403, 40301)
    assert registry.call("POST", "/subjects/s-value/versions", {"schema": SCHEMA}, auth=logins["writer"]) \
        == (200, {"id": 1})
    assert registry.call("PUT", "/mode", {"mode": "READONLY"}, auth=logins["writer"])[0] == 403
    assert registry.call("PUT", "/mode", {"mode": "READONLY"}, auth=logins["admin"]) == (200, {"mode": "READONLY"})
    assert registry.call("GET", "/mode") == (200, {"mode": "READONLY"})
    assert registry.call("DELETE", "/subjects/s-value", auth=logins["writer"])[0] == 403
    log = registry.log_path.read_text()
    assert "failed login of user 'reader'" in log and "wrong" not in log.split("failed login")[1].split("\n")[0]


def test_a_client_that_does_not_trust_the_ca_is_refused(registry: RegistryProcess, tmp_path: Path) -> None:
    stranger = CertificateAuthority(tmp_path / "other-ca")
    with pytest.raises(urllib.error.URLError) as raised:
        request(registry.url + "/subjects", context=ssl.create_default_context(cafile=str(stranger.cert_path)))
    assert isinstance(raised.value.reason, ssl.SSLCertVerificationError)
    settings = RegistryClientSettings.from_config({"basic.auth.user.info": "reader:x",
                                                   "schema.registry.ssl.ca.location": str(stranger.cert_path)})
    with SchemaRegistryClient(registry.url, settings=settings) as client, \
            pytest.raises(SchemaRegistryError, match="CERTIFICATE_VERIFY_FAILED"):
        client.latest("s-value")


def test_a_registry_requiring_client_certificates(tmp_path: Path, secured: HttpSecurityFiles) -> None:
    client = secured.authority.issue("etl", hosts=())
    args = (*secured.settings(), "--set", "ssl.client.authentication=REQUIRED",
            "--set", f"ssl.truststore.location={secured.ca_file}")
    with RegistryProcess(tmp_path / "mtls.log", data_dir=tmp_path / "mtls", extra_args=args,
                         auth=secured.logins["reader"], ca_file=secured.ca_file, client_bundle=client.bundle) as registry:
        values = {"schema.registry.url": registry.url, "basic.auth.user.info": ":".join(secured.logins["reader"]),
                  "schema.registry.ssl.ca.location": str(secured.ca_file)}
        with SchemaRegistryClient.from_config(values) as without, pytest.raises(SchemaRegistryError) as refused:
            without.latest("s-value")
        assert refused.value.status == 0  # the handshake failed: no certificate
        with SchemaRegistryClient.from_config({**values, "schema.registry.ssl.certificate.location": str(client.cert),
                                               "schema.registry.ssl.key.location": str(client.key)}) as with_cert, \
                pytest.raises(SchemaRegistryError) as missing:
            with_cert.latest("s-value")
        assert missing.value.code == 40401  # through TLS and the login: the subject is unknown


def test_our_client_with_confluents_settings(registry: RegistryProcess, secured: HttpSecurityFiles) -> None:
    def client(login: tuple[str, str] | None) -> SchemaRegistryClient:
        values = {"schema.registry.url": registry.url, "schema.registry.ssl.ca.location": str(secured.ca_file)}
        if login:
            values["schema.registry.basic.auth.user.info"] = ":".join(login)
        return SchemaRegistryClient.from_config(values)

    with client(secured.logins["writer"]) as writer, client(secured.logins["reader"]) as reader, \
            client(None) as anonymous:
        schema_id = writer.register(subject_for("PageViewEvent"), SCHEMA)
        assert reader.schema(schema_id).text and reader.latest(subject_for("PageViewEvent"))[0] == schema_id
        with pytest.raises(SchemaRegistryError) as refused:
            reader.register("other-value", SCHEMA)
        assert (refused.value.status, refused.value.code) == (403, 40301)
        with pytest.raises(SchemaRegistryError) as anonymous_refused:
            anonymous.schema(schema_id)
        assert (anonymous_refused.value.status, anonymous_refused.value.code) == (401, 40101)


def test_confluent_kafka_client_and_serializer_over_https_with_basic_auth(registry: RegistryProcess,
                                                                           secured: HttpSecurityFiles) -> None:
    def client(user: str) -> ConfluentClient:
        return ConfluentClient({"url": registry.url, "basic.auth.user.info": ":".join(secured.logins[user]),
                                "ssl.ca.location": str(secured.ca_file)})

    writer, reader = client("writer"), client("reader")
    schema_id = writer.register_schema(subject_for("PageViewEvent"), Schema(SCHEMA, "AVRO"))
    assert json.loads(reader.get_schema(schema_id).schema_str) == json.loads(SCHEMA)
    assert reader.get_latest_version(subject_for("PageViewEvent")).schema_id == schema_id
    with pytest.raises(ConfluentError) as raised:
        reader.register_schema("other-value", Schema(SCHEMA, "AVRO"))
    assert raised.value.http_status_code == 403 and raised.value.error_code == 40301

    context = SerializationContext("SearchEvent", MessageField.VALUE)
    event = generate_one(parse_schema(load_schema("SearchEvent")))
    encoded = AvroSerializer(writer, json.dumps(load_schema("SearchEvent")))(event, context)
    assert struct.unpack(">I", encoded[1:5])[0] == reader.get_latest_version(subject_for("SearchEvent")).schema_id
