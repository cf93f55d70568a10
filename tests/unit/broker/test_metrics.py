"""The broker's metrics in-process: error codes found where each response declares them, request and topic
counters exported as Prometheus families, the scrape-time state collector reading real logs and partitions,
also while partitions are created and deleted under it."""

from __future__ import annotations

import sys
import threading

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tests.unit.broker.log.log_support import make_batch

from broker.log import LogConfig, LogManager
from broker.metadata import BrokerEndpoint, StandaloneMetadata
from broker.metrics import LATENCY_BUCKETS, ApiStats, BrokerMetrics, error_code_counter, error_code_paths
from broker.replica_manager import ReplicaManager
from broker.state_metrics import BrokerStateCollector
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import APIS


def samples(metrics: BrokerMetrics) -> dict[tuple[str, frozenset], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_error_code_paths_follow_the_declared_responses():
    assert error_code_paths(APIS[ApiKey.PRODUCE].response) == (("responses", "partition_responses"),)
    assert error_code_paths(APIS[ApiKey.FETCH].response) == ((), ("responses", "partitions"))
    assert error_code_paths(APIS[ApiKey.METADATA].response) == (("topics",), ("topics", "partitions"))


def test_every_declared_error_code_has_a_path():
    def error_code_fields(fields) -> int:
        return sum(1 if f.key == "error_code" else error_code_fields(f.fields) for f in fields)
    for api in APIS.values():
        assert len(error_code_paths(api.response)) == error_code_fields(api.response), api.name


def test_error_codes_are_counted_per_entry_and_none_is_not():
    body = {"topics": [{"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partitions": []},
                       {"error_code": 0, "partitions": [{"error_code": ErrorCode.LEADER_NOT_AVAILABLE},
                                                        {"error_code": ErrorCode.NONE}]}]}
    errors: dict[int, int] = {}
    error_code_counter(error_code_paths(APIS[ApiKey.METADATA].response))(body, errors)
    assert errors == {ErrorCode.LEADER_NOT_AVAILABLE: 2}


def test_handlers_that_count_their_own_errors_skip_the_walk():
    stats = ApiStats(ApiKey.PRODUCE, walk_responses=False)
    stats.completed(7, 0.001, {"responses": [{"partition_responses": [{"error_code": ErrorCode.MESSAGE_TOO_LARGE}]}]})
    stats.count_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert stats.errors == {ErrorCode.NOT_LEADER_OR_FOLLOWER: 1} and stats.requests == {7: 1}


def test_api_stats_count_versions_latency_buckets_and_errors():
    stats = ApiStats(ApiKey.PRODUCE)
    response = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": ErrorCode.NONE}, {"index": 1, "error_code": ErrorCode.MESSAGE_TOO_LARGE}]}]}
    stats.completed(7, 0.0001, response)
    stats.completed(7, 0.002, response)
    stats.completed(3, 100.0, None)
    assert stats.name == "Produce"
    assert stats.requests == {7: 2, 3: 1}
    assert stats.errors == {ErrorCode.MESSAGE_TOO_LARGE: 2}
    assert stats.buckets[0] == 1 and stats.buckets[LATENCY_BUCKETS.index(0.0025)] == 1 and stats.buckets[-1] == 1


def test_counters_are_exported_with_cumulative_buckets_and_deleted_topics_vanish():
    metrics = BrokerMetrics()
    metrics.topic_stats("kept").messages_in += 3
    metrics.topic_stats("gone").bytes_out += 10
    metrics.api_stats(ApiKey.FETCH).completed(4, 0.003, {"error_code": 0, "responses": [
        {"topic": "t", "partitions": [{"error_code": ErrorCode.OFFSET_OUT_OF_RANGE}]}]})
    metrics.remove_topic("gone")
    found = samples(metrics)
    assert found[("kafka_server_brokertopicmetrics_messages_in_total", frozenset({("topic", "kept")}))] == 3
    assert not any(dict(labels).get("topic") == "gone" for _, labels in found)
    assert found[("kafka_network_requestmetrics_requests_total",
                  frozenset({("request", "Fetch"), ("version", "4")}))] == 1
    assert found[("kafka_network_requestmetrics_errors_total",
                  frozenset({("request", "Fetch"), ("error", "OFFSET_OUT_OF_RANGE")}))] == 1
    buckets = {dict(labels)["le"]: v for (name, labels), v in found.items()
               if name == "kafka_network_requestmetrics_total_time_seconds_bucket"}
    assert buckets["0.0025"] == 0 and buckets["0.005"] == 1 and buckets["+Inf"] == 1


class Connections:
    connection_count = 2
    connections_created = 5
    connections_closed = 3
    client_errors = {"malformed_request": 7}


@pytest.fixture
def broker_parts(tmp_path):
    metrics = BrokerMetrics()
    manager = LogManager([tmp_path / "logs"], LogConfig(segment_bytes=1024), on_flush=metrics.observe_flush)
    manager.startup()
    replica_manager = ReplicaManager(manager, metrics=metrics)
    metadata = StandaloneMetadata(tmp_path / "logs", BrokerEndpoint(1, "127.0.0.1", 9092))
    collector = BrokerStateCollector(1, manager, replica_manager, metadata, Connections(), lambda: True)
    metrics.registry.register(collector)
    yield metrics, manager, replica_manager, metadata, collector
    manager.shutdown()


def test_state_collector_reports_logs_partitions_connections_and_flushes(broker_parts):
    metrics, manager, replica_manager, metadata, _ = broker_parts
    metadata.create_topic("t", 2)
    for index in (0, 1):
        replica_manager.make_leader("t", index)
    appended = 0
    for _ in range(10):
        batch = make_batch(5)
        assert replica_manager.append_records("t", 0, batch).error_code == ErrorCode.NONE
        appended += len(batch)
    manager.get_log("t", 0).flush()
    found = samples(metrics)
    labels = frozenset({("topic", "t"), ("partition", "0")})
    log = manager.get_log("t", 0)
    assert log.segment_count > 1
    assert found[("kafka_log_log_size_bytes", labels)] == appended
    assert found[("kafka_log_log_end_offset", labels)] == 50
    assert found[("kafka_log_log_start_offset", labels)] == 0
    assert found[("kafka_log_log_num_log_segments", labels)] == log.segment_count
    assert found[("kafka_server_brokertopicmetrics_messages_in_total", frozenset({("topic", "t")}))] == 50
    assert found[("kafka_server_brokertopicmetrics_bytes_in_total", frozenset({("topic", "t")}))] == appended
    assert found[("kafka_server_replicamanager_leader_count", frozenset())] == 2
    assert found[("kafka_server_replicamanager_partition_count", frozenset())] == 2
    assert found[("kafka_controller_kafkacontroller_offline_partitions_count", frozenset())] == 0
    assert found[("kafka_server_socket_server_metrics_connection_count", frozenset())] == 2
    assert found[("kafka_server_socket_server_metrics_connection_close_total", frozenset())] == 3
    assert found[("kafka_server_socket_server_metrics_client_errors_total", frozenset({("kind", "malformed_request")}))] == 7
    assert found[("kafka_log_logflushstats_log_flush_time_seconds_count", frozenset())] >= 1


def test_scrapes_while_partitions_come_and_go(broker_parts):
    metrics, _, replica_manager, metadata, collector = broker_parts
    metadata.create_topic("moving", 16)
    stop = threading.Event()
    failures: list[BaseException] = []

    def scrape_repeatedly() -> None:
        while not stop.is_set():
            try:
                for _ in collector.collect():
                    pass
                generate_latest(metrics.registry)
            except BaseException as exc:
                failures.append(exc)
                return

    scraper = threading.Thread(target=scrape_repeatedly)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, so that scrapes are interrupted
    scraper.start()
    try:
        for _ in range(300):  # leadership coming and going: the hosted partitions change all the time
            for index in range(16):
                replica_manager.make_leader("moving", index)
            for index in range(16):
                replica_manager.stop_partition("moving", index, delete=False)
        for round_ in range(4):  # topics created and deleted, logs and all
            name = f"churn{round_}"
            metadata.create_topic(name, 4)
            for index in range(4):
                replica_manager.make_leader(name, index)
                replica_manager.append_records(name, index, make_batch(2))
            for index in range(4):
                replica_manager.stop_partition(name, index, delete=True)
            metadata.delete_topic(name)
    finally:
        stop.set()
        scraper.join(10)
        sys.setswitchinterval(interval)
    assert failures == []
    assert not any(name.startswith("churn") for name in metrics.topics)
