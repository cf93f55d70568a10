"""Stock clients against an RF 3 cluster through a leader kill: confluent-kafka's idempotent acks=all producer
and its consumer keep going while the leader of a partition is SIGKILLed, kafka-python produces and
consumes after the failover, and kcat writes with acks=all and reads everything back, each message once."""

from __future__ import annotations

import threading

import pytest

from tests.integration.broker.test_replication import SETTINGS
from tests.support.clients import by_partition, confluent_consume, kafka_python_consume, run_kcat
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(240)

TOPIC = "clients-rf3"
PARTITIONS = 3


def test_stock_clients_ride_through_a_leader_kill(broker_cluster_factory, zk_connect):
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    cluster = broker_cluster_factory(zk_connect, size=3, overrides=SETTINGS)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="replication-test")
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], timeout_ms=15000)
    finally:
        admin.close()
    wait_until(lambda: all(len(cluster.partition_state(TOPIC, p)["isr"]) == 3 for p in range(PARTITIONS)), 30,
               message="every replica in sync")

    total_confluent, total_kafka_python = 400, 100
    consumed: list = []
    consumer = threading.Thread(target=lambda: consumed.extend(
        confluent_consume(cluster.bootstrap, TOPIC, range(PARTITIONS), total_confluent + total_kafka_python + 20,
                          timeout=150)), daemon=True)
    consumer.start()

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "log_level": 0})
    failures: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(str(error))
    victim = cluster.partition_state(TOPIC, 0)["leader"]
    for i in range(total_confluent):
        producer.produce(TOPIC, f"confluent-{i}".encode(), on_delivery=delivered)
        producer.poll(0)
        if i == total_confluent // 2:
            producer.flush(30)
            cluster.brokers[victim].kill()
    assert producer.flush(120) == 0
    assert failures == []
    wait_until(lambda: cluster.partition_state(TOPIC, 0)["leader"] not in (-1, victim), 30,
               message="a new leader of partition 0")

    kafka_python = KafkaProducer(bootstrap_servers=",".join(b.bootstrap for b in cluster.live()), acks="all",
                                 retries=10)
    try:
        futures = [kafka_python.send(TOPIC, f"kafka-python-{i}".encode()) for i in range(total_kafka_python)]
        kafka_python.flush(60)
        assert all(f.get(30).offset >= 0 for f in futures)
    finally:
        kafka_python.close()

    live = ",".join(b.bootstrap for b in cluster.live())
    run_kcat(["-b", live, "-t", TOPIC, "-P", "-X", "acks=all", "-X", "enable.idempotence=true"],
             input_bytes=b"".join(f"kcat-{i}\n".encode() for i in range(20)))
    consumer.join(160)
    expected = {f"confluent-{i}" for i in range(total_confluent)} | {
        f"kafka-python-{i}" for i in range(total_kafka_python)} | {f"kcat-{i}" for i in range(20)}
    assert sorted(r.value.decode() for r in consumed) == sorted(expected)  # each once, none missing

    cluster.brokers[victim].restart()
    wait_until(lambda: all(len(cluster.partition_state(TOPIC, p)["isr"]) == 3 for p in range(PARTITIONS)), 30,
               message="the restarted broker back in every ISR")
    kafka_read = kafka_python_consume(live, TOPIC, range(PARTITIONS), len(expected), timeout=60)
    assert sorted(r.value.decode() for r in kafka_read) == sorted(expected)
    lines = run_kcat(["-b", cluster.bootstrap, "-t", TOPIC, "-C", "-o", "beginning", "-e", "-q", "-f",
                      "%p %o %s\n"]).decode().splitlines()
    assert sorted(line.split(" ", 2)[2] for line in lines) == sorted(expected)
    for partition, records in by_partition(kafka_read).items():
        assert [r.offset for r in records] == sorted(r.offset for r in records)
