"""Stock clients logged in as real users (SCRAM-SHA-512 over SASL_PLAINTEXT) against a broker with the authorizer
on: alice, without WRITE on a topic she may read, and bob, with no ACL at all, get TOPIC_AUTHORIZATION_FAILED
from kcat, confluent-kafka, kafka-python and aiokafka producers, while the topic alice may write takes her
messages; a consumer group needs READ on the group; the super user passes whatever the ACLs; confluent-kafka's and
kafka-python's admin clients manage ACLs."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Iterator

import pytest

from pipeline.client.admin import AdminClient
from pipeline.security.acl import AclOperation, ResourceType
from pipeline.security.client_settings import ClientSecurity
from tests.support import BrokerProcess
from tests.support.acls import AUTHORIZER, acl, seed_log_dir
from tests.support.clients import KCAT
from tests.support.ports import free_port
from tests.support.sasl import kafka_python_settings, librdkafka_settings, seed_users

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
WRITABLE, READ_ONLY = "acl-writable", "acl-read-only"


def security(user: str) -> ClientSecurity:
    return ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", username=user,
                          password=USERS[user])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    home = tmp_path_factory.mktemp("acl-clients")
    port = free_port("127.0.0.1")
    seed_users(home / "logs", USERS)
    seed_log_dir(home / "logs", acl(ResourceType.TOPIC, WRITABLE, AclOperation.WRITE, principal="User:alice")
                 + acl(ResourceType.TOPIC, READ_ONLY, AclOperation.READ, principal="User:alice")
                 + acl(ResourceType.GROUP, "alice-group", AclOperation.READ, principal="User:alice"))
    overrides = {**AUTHORIZER, "super.users": "User:admin", "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"}
    with BrokerProcess(home / "logs", port=port, overrides=overrides, log_path=home / "broker.log") as broker:
        with AdminClient(broker.bootstrap, security=security("admin")) as admin:
            admin.create_topics([WRITABLE, READ_ONLY], 1, 1)
        yield broker


def kcat_produce(bootstrap: str, topic: str, user: str) -> str:
    """kcat's report of one message: '' when delivered, its error otherwise."""
    login = [arg for key, value in librdkafka_settings(user, USERS[user]).items() for arg in ("-X", f"{key}={value}")]
    completed = subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-X", "message.send.max.retries=0", *login],
                               input=b"value\n", capture_output=True, timeout=60, check=False)
    return "" if completed.returncode == 0 and not completed.stderr else completed.stderr.decode(errors="replace")


def confluent_produce(bootstrap: str, topic: str, user: str) -> str:
    from confluent_kafka import KafkaError, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0,
                         **librdkafka_settings(user, USERS[user])})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"value", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    error = errors[0]
    return "" if error is None else error.name()


def kafka_python_produce(bootstrap: str, topic: str, user: str) -> str:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0, max_block_ms=15000,
                             **kafka_python_settings(user, USERS[user]))
    try:
        producer.send(topic, b"value").get(timeout=30)
    except KafkaError as exc:
        return type(exc).__name__
    finally:
        producer.close(timeout=5)
    return ""


def aiokafka_produce(bootstrap: str, topic: str, user: str) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def send() -> str:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000,
                                    **kafka_python_settings(user, USERS[user]))
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"value")
        except KafkaError as exc:
            return type(exc).__name__
        finally:
            await producer.stop()
        return ""
    return asyncio.run(send())


CLIENTS = {
    "kcat": (kcat_produce, "Topic authorization failed"),
    "confluent-kafka": (confluent_produce, "TOPIC_AUTHORIZATION_FAILED"),
    "kafka-python": (kafka_python_produce, "TopicAuthorizationFailedError"),
    "aiokafka": (aiokafka_produce, "TopicAuthorizationFailedError"),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_producer_without_write_gets_topic_authorization_failed(secured, client):
    produce, expected = CLIENTS[client]
    assert produce(secured.bootstrap, WRITABLE, "alice") == ""
    assert expected in produce(secured.bootstrap, READ_ONLY, "alice")
    assert expected in produce(secured.bootstrap, WRITABLE, "bob")
    assert produce(secured.bootstrap, READ_ONLY, "admin") == ""


def test_consumer_groups_need_read_on_the_group(secured):
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    assert kafka_python_produce(secured.bootstrap, READ_ONLY, "admin") == ""

    def consumer(group: str) -> KafkaConsumer:
        return KafkaConsumer(READ_ONLY, bootstrap_servers=secured.bootstrap, group_id=group,
                             auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **kafka_python_settings("alice", USERS["alice"]))
    denied = consumer("other-group")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(20):
                denied.poll(timeout_ms=500)
    finally:
        denied.close()
    allowed = consumer("alice-group")
    try:
        assert next(iter(allowed)).value == b"value"
        allowed.commit()
    finally:
        allowed.close()


def test_stock_admin_clients_create_describe_and_delete_acls(secured):
    """confluent-kafka's and kafka-python's admin clients speak CreateAcls, DescribeAcls and DeleteAcls with us."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation as Op, AclPermissionType as Perm,
                                       AdminClient as ConfluentAdmin, ResourcePatternType, ResourceType as Kind)
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter, ResourceType)

    confluent = ConfluentAdmin({"bootstrap.servers": secured.bootstrap, **librdkafka_settings("admin", USERS["admin"])})
    binding = AclBinding(Kind.TOPIC, "confluent-", ResourcePatternType.PREFIXED, "User:carol", "*", Op.WRITE,
                         Perm.ALLOW)
    for future in confluent.create_acls([binding]).values():
        future.result(timeout=30)
    any_carol = AclBindingFilter(Kind.ANY, None, ResourcePatternType.ANY, "User:carol", None, Op.ANY, Perm.ANY)
    assert confluent.describe_acls(any_carol).result(timeout=30) == [binding]

    python_admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap, **kafka_python_settings("admin",
                                                                                               USERS["admin"]))
    try:
        acl_ = ACL("User:carol", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                   ResourcePattern(ResourceType.GROUP, "carols", ACLResourcePatternType.LITERAL))
        created = python_admin.create_acls([acl_])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        found, error = python_admin.describe_acls(ACLFilter("User:carol", None, ACLOperation.ANY,
                                                            ACLPermissionType.ANY,
                                                            ResourcePatternFilter(ResourceType.ANY, None,
                                                                                  ACLResourcePatternType.ANY)))
        assert {(a.resource_pattern.resource_type, a.resource_pattern.resource_name) for a in found} == {
            (ResourceType.TOPIC, "confluent-"), (ResourceType.GROUP, "carols")}
    finally:
        python_admin.close()

    deleted = list(confluent.delete_acls([any_carol]).values())[0].result(timeout=30)
    assert len(deleted) == 2
    assert confluent.describe_acls(any_carol).result(timeout=30) == []


def test_the_cli_logs_in_with_its_command_config(secured, tmp_path):
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline", "acls", "--bootstrap-server", secured.bootstrap,
                               *args], capture_output=True, text=True, timeout=60, check=False)
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                      'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                      'username="admin" password="admin-secret";\n')
    listed = cli("--command-config", str(config), "--list", "--topic", WRITABLE)
    assert listed.returncode == 0, listed.stderr
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in listed.stdout
    alice = tmp_path / "alice.properties"
    alice.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=alice\n"
                     "sasl.password=alice-secret\n")
    refused = cli("--command-config", str(alice), "--add", "--allow-principal", "User:alice", "--topic", "x")
    assert refused.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    assert "alice-secret" not in refused.stderr + refused.stdout
