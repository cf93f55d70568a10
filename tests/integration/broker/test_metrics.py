"""The broker's Prometheus endpoint (metrics.port), scraped over HTTP from real broker processes.

A standalone broker: per-topic counters equal what was produced and fetched, requests are counted by API
and version, error codes by API, and the log and connection gauges match the broker's state. A 3-broker
cluster on a real ZooKeeper: exactly one broker reports itself active controller, and after a broker that
leads partitions is killed (no replication: they go offline) the others report them offline.
"""

from __future__ import annotations

import re
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.protocol.errors import ErrorCode
from pipeline.records import encode_batch
from tests.support import group_wire, wire
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.cluster import BrokerCluster
from tests.support.broker_metrics import metrics_url, scrape, value
from tests.support.polling import wait_until

def test_a_standalone_broker_counts_what_was_produced_and_fetched(broker_factory):
    broker = broker_factory(overrides={"metrics.port": 0, "message.max.bytes": 2000,
                                       "log.flush.interval.messages": 1})
    create_topic(broker.bootstrap, "metered", partitions=2)
    batches = {0: [encode_batch([b"a", b"bb"]), encode_batch([b"ccc", b"dddd", b"e"])], 1: [encode_batch([b"f"])]}
    before = scrape(broker)
    flushes_before = value(before, "kafka_log_logflushstats_log_flush_time_seconds_count")
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        for partition, records in batches.items():
            for batch in records:
                assert wire.produce(conn, "metered", partition, batch).error_code == ErrorCode.NONE
        unknown = wire.produce(conn, "metered", 7, encode_batch([b"nowhere"]))
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        too_large = wire.produce(conn, "metered", 0, encode_batch([b"x" * 3000]))
        assert too_large.error_code == ErrorCode.MESSAGE_TOO_LARGE
        fetched = {p: wire.fetch(conn, "metered", p, 0, max_wait_ms=0).records for p in batches}
        assert all(fetched.values())
        assert wire.fetch(conn, "metered", 1, 100, max_wait_ms=0).error_code == ErrorCode.OFFSET_OUT_OF_RANGE

        samples = wait_until(lambda: (s := scrape(broker)) and value(
            s, "kafka_server_socket_server_metrics_connection_count") == 1 and s,
            message="one open connection (the test's)")
    produced_bytes = {p: sum(len(b) for b in records) for p, records in batches.items()}
    topic = {"topic": "metered"}
    assert value(samples, "kafka_server_brokertopicmetrics_messages_in_total", **topic) == 6
    assert value(samples, "kafka_server_brokertopicmetrics_bytes_in_total", **topic) == sum(produced_bytes.values())
    assert value(samples, "kafka_server_brokertopicmetrics_bytes_out_total", **topic) == sum(map(len, fetched.values()))
    # The unknown partition is not this broker's: only the too-large batch is a failed produce of the topic.
    assert value(samples, "kafka_server_brokertopicmetrics_failed_produce_requests_total", **topic) == 1
    assert value(samples, "kafka_server_brokertopicmetrics_failed_fetch_requests_total", **topic) == 1

    assert value(samples, "kafka_network_requestmetrics_requests_total", request="Produce", version=3) == 5
    assert value(samples, "kafka_network_requestmetrics_requests_total", request="Fetch", version=4) == 3
    assert value(samples, "kafka_network_requestmetrics_total_time_seconds_count", request="Produce") == 5
    assert value(samples, "kafka_network_requestmetrics_total_time_seconds_bucket", request="Produce", le="+Inf") == 5
    assert value(samples, "kafka_network_requestmetrics_errors_total", request="Produce",
                 error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert value(samples, "kafka_network_requestmetrics_errors_total", request="Produce",
                 error="MESSAGE_TOO_LARGE") == 1
    assert value(samples, "kafka_network_requestmetrics_errors_total", request="Fetch",
                 error="OFFSET_OUT_OF_RANGE") == 1

    for partition, size in produced_bytes.items():
        labels = {"topic": "metered", "partition": partition}
        assert value(samples, "kafka_log_log_end_offset", **labels) == (5 if partition == 0 else 1)
        assert value(samples, "kafka_log_log_start_offset", **labels) == 0
        assert value(samples, "kafka_log_log_size_bytes", **labels) == size
        assert value(samples, "kafka_log_log_num_log_segments", **labels) == 1
        assert size == sum(f.stat().st_size for f in broker.segment_files("metered", partition))
    assert value(samples, "kafka_server_replicamanager_leader_count") == 2
    assert value(samples, "kafka_server_replicamanager_partition_count") == 2
    assert value(samples, "kafka_controller_kafkacontroller_active_controller_count") == 1
    assert value(samples, "kafka_controller_kafkacontroller_offline_partitions_count") == 0
    # log.flush.interval.messages=1: every acknowledged append waited for a flush.
    assert value(samples, "kafka_log_logflushstats_log_flush_time_seconds_count") > flushes_before

    after = wait_until(lambda: (s := scrape(broker)) and value(
        s, "kafka_server_socket_server_metrics_connection_count") == 0 and s, message="no open connection")
    created = value(after, "kafka_server_socket_server_metrics_connection_creation_total")
    assert created >= 2  # the admin client's and the test's
    assert value(after, "kafka_server_socket_server_metrics_connection_close_total") == created


def test_the_group_coordinator_reports_groups_by_state_rebalances_commits_and_expired_members(broker_factory):
    broker = broker_factory(overrides={"metrics.port": 0, "group.initial.rebalance.delay.ms": 0,
                                       "group.min.session.timeout.ms": 500})
    create_topic(broker.bootstrap, "grouped", partitions=2)
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        joined = group_wire.join_group(conn, "metered-group", "", ["grouped"], session_timeout_ms=500)
        if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            joined = group_wire.join_group(conn, "metered-group", joined.member_id, ["grouped"], session_timeout_ms=500)
        member = joined.member_id
        assert group_wire.receive_sync_group(conn, group_wire.send_sync_group(
            conn, "metered-group", joined.generation_id, member, {member: b""}))[0] == ErrorCode.NONE
        assert group_wire.offset_commit(conn, "metered-group", joined.generation_id, member, "grouped",
                                        {0: 5, 1: 6}) == {0: ErrorCode.NONE, 1: ErrorCode.NONE}
        stable = scrape(broker)
    assert value(stable, "kafka_coordinator_group_groupmetadatamanager_num_groups", state="Stable") == 1
    assert value(stable, "kafka_coordinator_group_groupmetadatamanager_num_groups", state="Empty") == 0
    assert value(stable, "kafka_coordinator_group_groupcoordinator_rebalances_total") == 1
    assert value(stable, "kafka_coordinator_group_groupcoordinator_offset_commits_total") == 2
    # The member stops heartbeating: its session ends and the group is empty.
    expired = wait_until(lambda: (s := scrape(broker)) and value(
        s, "kafka_coordinator_group_groupmetadatamanager_num_groups", state="Empty") == 1 and s,
        message="the group empty after the member's session")
    assert value(expired, "kafka_coordinator_group_groupcoordinator_expired_members_total") == 1


@pytest.mark.parametrize("overrides", [{}, {"metrics.port": ""}], ids=["unset", "empty"])
def test_without_metrics_port_there_is_no_endpoint(broker_factory, overrides):
    broker = broker_factory(overrides=overrides)
    assert "Prometheus" not in broker.log_text()


def test_metrics_port_serves_on_the_port_given(broker_factory):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    broker = broker_factory(overrides={"metrics.port": port})
    assert metrics_url(broker) == f"http://127.0.0.1:{port}/metrics"
    assert value(scrape(broker), "kafka_server_replicamanager_leader_count") == 0


def controller_counts(cluster: BrokerCluster) -> dict[int, float | None]:
    return {broker_id: value(scrape(broker), "kafka_controller_kafkacontroller_active_controller_count")
            for broker_id, broker in cluster.brokers.items() if broker.is_running}


def test_one_active_controller_and_offline_partitions_after_a_leader_dies(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=3, overrides={"metrics.port": 0,
                                                                    "zookeeper.session.timeout.ms": 4000})
    counts = wait_until(lambda: (c := controller_counts(cluster)) and sorted(c.values()) == [0, 0, 1] and c,
                        30, message=lambda: f"exactly one active controller (have {controller_counts(cluster)})")
    controller = next(b for b, count in counts.items() if count == 1)
    assert controller == cluster.controller_id()

    create_topic(cluster.bootstrap, "spread", partitions=6)
    leaders = cluster.wait_for_metadata("spread", 6)
    victim = next(b for b in sorted(set(leaders.values())) if b != controller)
    led_by_victim = sum(1 for leader in leaders.values() if leader == victim)
    for broker_id, broker in cluster.brokers.items():
        samples = wait_until(lambda: (s := scrape(broker)) and value(
            s, "kafka_server_replicamanager_leader_count") == sum(1 for l in leaders.values() if l == broker_id)
            and s, 30, message=f"broker {broker_id} leading its partitions")
        assert value(samples, "kafka_controller_kafkacontroller_offline_partitions_count") == 0

    cluster.brokers[victim].kill()
    for broker_id in (b for b in cluster.brokers if b != victim):
        wait_until(lambda: value(scrape(cluster.brokers[broker_id]),
                                 "kafka_controller_kafkacontroller_offline_partitions_count") == led_by_victim,
                   30, message=f"broker {broker_id} reporting {led_by_victim} offline partition(s)")
    assert controller_counts(cluster)[controller] == 1
