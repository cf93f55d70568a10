"""A cluster broker while ZooKeeper stops answering (SIGSTOP): requests that need ZooKeeper fail fast with
retriable errors or go on in the background, nothing waits behind them (produce and fetch to partitions
the broker leads go on from its cached metadata), and all resumes after SIGCONT."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from pipeline.records import encode_batch
from pipeline.zk.server import ZooKeeperServer
from tests.support import BrokerProcess, wait_until, wire
from tests.support.clients import create_topic
from tests.support.cluster import BrokerCluster, create_topics_result, metadata, metadata_request, parse_metadata
from tests.support.zookeeper import frozen

SESSION_TIMEOUT_MS = 6000
LEADER_NOT_AVAILABLE = 5
REQUEST_TIMED_OUT = 7
COORDINATOR_NOT_AVAILABLE = 15
API_INIT_PRODUCER_ID = 22
API_DELETE_TOPICS = 20


def init_producer_id(conn: wire.KafkaConnection) -> tuple[int, int]:
    """InitProducerId v0 (idempotent, no transactional id): (error code, producer id)."""
    reader = conn.request(API_INIT_PRODUCER_ID, 0, wire.Writer().string(None).int32(60000).getvalue())
    reader.int32()  # throttle
    return reader.int16(), reader.int64()


def delete_topics_result(conn: wire.KafkaConnection, topic: str, timeout_ms: int) -> int:
    """DeleteTopics v1 for one topic: its error code."""
    reader = conn.request(API_DELETE_TOPICS, 1, wire.Writer().array_len(1).string(topic).int32(timeout_ms).getvalue())
    reader.int32()  # throttle
    assert reader.int32() == 1
    reader.string()
    return reader.int16()


def test_a_stopped_zookeeper_holds_up_nothing_and_everything_resumes(tmp_path, broker_cluster_factory):
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        cluster = broker_cluster_factory(server.connect_string + "/outage", size=1,
                                         overrides={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS})
        try:
            served_through_the_outage(server, cluster.brokers[1], cluster)
        finally:
            cluster.stop()  # while ZooKeeper still runs, so the brokers leave at once


def served_through_the_outage(server: ZooKeeperServer, broker: BrokerProcess, cluster: BrokerCluster) -> None:
    for topic in ("existing", "doomed"):
        create_topic(broker.bootstrap, topic, partitions=1)
        cluster.wait_for_metadata(topic, 1)

    with frozen(server):
        with wire.KafkaConnection(broker.host, broker.port, timeout=3.0) as conn:
            started = time.monotonic()
            asked = conn.send(wire.API_METADATA, 5, metadata_request(["born-in-the-dark"], allow_create=True))
            produced = conn.send(wire.API_PRODUCE, 3,
                                 wire.produce_request_body("existing", [(0, encode_batch([b"during"]))]))
            fetched = conn.send(wire.API_FETCH, 4, wire.fetch_request_body("existing", 0, 0, max_wait_ms=0))
            answer = parse_metadata(conn.receive(asked))
            (result,) = wire.parse_produce_response(conn.receive(produced))
            (read,) = wire.parse_fetch_response(conn.receive(fetched))
            elapsed = time.monotonic() - started
        assert answer["topics"]["born-in-the-dark"]["error"] == LEADER_NOT_AVAILABLE
        assert result.error_code == 0, f"produce to a led partition: error {result.error_code}"
        assert read.error_code == 0 and read.high_watermark == 1
        assert elapsed < 3.0

        # Requests that need ZooKeeper give up within the ZooKeeper deadline, with retriable errors.
        deadline_s = SESSION_TIMEOUT_MS / 1000 + 5

        def ask_for_a_producer_id() -> tuple[int, int]:
            with wire.KafkaConnection(broker.host, broker.port, timeout=deadline_s) as other:
                return init_producer_id(other)

        def create() -> int:
            with wire.KafkaConnection(broker.host, broker.port, timeout=deadline_s) as other:
                return create_topics_result(other, "created-in-the-dark", 1, timeout_ms=30000)[0]
        def delete() -> int:
            with wire.KafkaConnection(broker.host, broker.port, timeout=deadline_s) as other:
                return delete_topics_result(other, "doomed", timeout_ms=30000)
        with ThreadPoolExecutor(3) as pool:
            producer_id = pool.submit(ask_for_a_producer_id)
            creation, deletion = pool.submit(create), pool.submit(delete)
            assert producer_id.result()[0] == COORDINATOR_NOT_AVAILABLE
            assert creation.result() == REQUEST_TIMED_OUT
            assert deletion.result() == REQUEST_TIMED_OUT

    def created() -> bool:
        topic = metadata(broker, ["born-in-the-dark"], allow_create=True)["topics"]["born-in-the-dark"]
        return topic["error"] == 0 and topic["partitions"][0]["leader"] == 1
    wait_until(created, 30, interval=0.2, message="the auto-created topic after ZooKeeper came back")
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        assert wire.produce(conn, "born-in-the-dark", 0, encode_batch([b"after"])).error_code == 0
        assert wire.produce(conn, "existing", 0, encode_batch([b"after"])).error_code == 0
        wait_until(lambda: init_producer_id(conn)[0] == 0, 30, interval=0.2,
                   message="a producer id after ZooKeeper came back")
    create_topic(broker.bootstrap, "created-after", partitions=1)
    cluster.wait_for_metadata("created-after", 1)
