"""Broker process lifecycle: start-up log line, advertised APIs, clean SIGTERM shutdown, data kept across restart."""

from __future__ import annotations

import re

from tests.support import CLEAN_SHUTDOWN_MARKER
from tests.support.clients import create_topic, kafka_python_consume
from tests.support.wire import KafkaConnection, api_versions

# Produce, Fetch, ListOffsets, Metadata, ApiVersions, CreateTopics, DeleteTopics, InitProducerId
REQUIRED_APIS = {0, 1, 2, 3, 18, 19, 20, 22}


def test_starts_logs_its_port_and_advertises_the_apis(broker):
    assert re.search(rf"started, listening on PLAINTEXT://127\.0\.0\.1:{broker.port}\b", broker.log_text()), \
        broker.log_tail()
    with KafkaConnection(broker.host, broker.port) as conn:
        versions = api_versions(conn)
    assert REQUIRED_APIS <= versions.keys(), f"missing APIs: {sorted(REQUIRED_APIS - versions.keys())}"
    # librdkafka uses RecordBatch v2 only with Produce >= 3 and Fetch >= 4.
    assert versions[0][1] >= 3 and versions[1][1] >= 4


def test_sigterm_exits_0_with_marker_and_data_survives_restart(broker):
    from kafka import KafkaProducer

    create_topic(broker.bootstrap, "durable", 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, enable_idempotence=False)
    try:
        for i in range(200):
            producer.send("durable", value=f"v{i}".encode(), partition=i % 2)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)

    assert broker.stop() == 0, broker.log_tail()
    assert (broker.log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    for p in range(2):
        assert (broker.partition_dir("durable", p) / f"{0:020d}.log").exists()

    broker.start()
    records = kafka_python_consume(broker.bootstrap, "durable", range(2), 200)
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(200))
