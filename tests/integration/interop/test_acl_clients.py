"""Stock clients against a broker with the authorizer on: a principal without WRITE on a topic gets
TOPIC_AUTHORIZATION_FAILED from kcat, confluent-kafka, kafka-python and aiokafka producers, while the topic it may
write to takes their messages. PLAINTEXT makes every client User:ANONYMOUS."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Iterator

import pytest

from pipeline.client.admin import AdminClient
from pipeline.security.acl import AclOperation, ResourceType
from tests.support import BrokerProcess
from tests.support.acls import AUTHORIZER, acl, administrator, seed_log_dir
from tests.support.clients import KCAT

WRITABLE, READ_ONLY = "acl-writable", "acl-read-only"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    home = tmp_path_factory.mktemp("acl-clients")
    seed_log_dir(home / "logs", administrator() + acl(ResourceType.TOPIC, WRITABLE, AclOperation.WRITE)
                 + acl(ResourceType.TOPIC, READ_ONLY, AclOperation.READ))
    with BrokerProcess(home / "logs", overrides=AUTHORIZER, log_path=home / "broker.log") as broker:
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topics([WRITABLE, READ_ONLY], 1, 1)
        yield broker


def kcat_produce(bootstrap: str, topic: str) -> str:
    """kcat's report of one message: '' when delivered, its error otherwise."""
    completed = subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-X", "message.send.max.retries=0"],
                               input=b"value\n", capture_output=True, timeout=60, check=False)
    return "" if completed.returncode == 0 and not completed.stderr else completed.stderr.decode(errors="replace")


def confluent_produce(bootstrap: str, topic: str) -> str:
    from confluent_kafka import KafkaError, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0})
    errors: list[KafkaError] = []
    producer.produce(topic, b"value", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    error = errors[0]
    return "" if error is None else error.name()


def kafka_python_produce(bootstrap: str, topic: str) -> str:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0, max_block_ms=15000)
    try:
        producer.send(topic, b"value").get(timeout=30)
    except KafkaError as exc:
        return type(exc).__name__
    finally:
        producer.close(timeout=5)
    return ""


def aiokafka_produce(bootstrap: str, topic: str) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def send() -> str:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000)
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
    assert produce(secured.bootstrap, WRITABLE) == ""
    assert expected in produce(secured.bootstrap, READ_ONLY)
