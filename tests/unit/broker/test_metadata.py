"""The standalone broker's topic registry and topic-level config mapping."""

from __future__ import annotations

import json

import pytest

from broker.admin_manager import AdminManager, TopicError, describe_topic_configs, topic_log_config
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.log.log_config import LogConfig
from broker.metadata import (
    PRODUCER_ID_BLOCK,
    BrokerEndpoint,
    InvalidTopicError,
    StandaloneMetadata,
    validate_topic_name,
)
from pipeline.protocol.errors import ErrorCode

LOCAL = BrokerEndpoint(0, "127.0.0.1", 9092)


def test_topics_survive_reopen(tmp_path):
    store = StandaloneMetadata(tmp_path, LOCAL)
    store.create_topic("events", 4, {"retention.ms": "1000"})
    cluster_id = store.cluster_id
    reopened = StandaloneMetadata(tmp_path, LOCAL)
    assert reopened.cluster_id == cluster_id
    assert reopened.topics["events"].partitions == 4
    assert reopened.topics["events"].configs == {"retention.ms": "1000"}
    reopened.delete_topic("events")
    assert "events" not in StandaloneMetadata(tmp_path, LOCAL).topics


def test_duplicate_topic_refused(tmp_path):
    store = StandaloneMetadata(tmp_path, LOCAL)
    store.create_topic("t", 1)
    with pytest.raises(FileExistsError):
        store.create_topic("t", 2)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250, "spaces here", "ünï", "evil\n", "\nevil",
                                  "ev\nil", "evil\r", "evil\x00"])
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_producer_ids_never_reused_after_restart(tmp_path):
    store = StandaloneMetadata(tmp_path, LOCAL)
    first = [store.next_producer_id() for _ in range(3)]
    assert first == [0, 1, 2]
    # A crash after handing out ids: the next process starts after the whole persisted block.
    later = StandaloneMetadata(tmp_path, LOCAL).next_producer_id()
    assert later >= PRODUCER_ID_BLOCK
    assert later not in first


def test_topic_config_overrides():
    default = LogConfig()
    config = topic_log_config(default, {"retention.ms": "-1", "segment.bytes": "1024", "flush.messages": "1"})
    assert config.retention_ms is None
    assert config.segment_bytes == 1024
    assert config.flush_interval_messages == 1
    assert config.max_message_bytes == default.max_message_bytes


@pytest.mark.parametrize("configs, message", [
    ({"cleanup.policy.unknown": "x"}, "unknown"),
    ({"retention.ms": "soon"}, "not a number"),
    ({"segment.bytes": str(2**31)}, "segment.bytes=2147483648 is above its maximum 2147483647"),
    ({"segment.bytes": "13"}, "segment.bytes=13 is below its minimum 14"),
    ({"segment.ms": "0"}, "segment.ms=0 is below its minimum 1"),
    ({"max.message.bytes": "-1"}, "below its minimum 0"),
    ({"retention.ms": "-2"}, "retention.ms=-2 is below its minimum -1"),
    ({"segment.index.bytes": "3"}, "below its minimum 4"),
    ({"flush.messages": "0"}, "flush.messages=0 is below its minimum 1"),
    ({"flush.ms": "-1"}, "below its minimum 0"),
    ({"index.interval.bytes": str(2**31)}, "above its maximum"),
    ({"cleanup.policy": "compact,forever"}, "must be delete, compact or compact,delete"),
    ({"cleanup.policy": ""}, "must be delete, compact or compact,delete"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "above its maximum 1.0"),
    ({"min.cleanable.dirty.ratio": "half"}, "not a number"),
    ({"max.compaction.lag.ms": "0"}, "below its minimum 1"),
])
def test_bad_topic_configs(configs, message):
    with pytest.raises(TopicError, match=message) as info:
        topic_log_config(LogConfig(), configs)
    assert info.value.error_code == ErrorCode.INVALID_CONFIG


def test_compaction_configs_and_how_describe_configs_shows_them():
    config = topic_log_config(LogConfig(), {"cleanup.policy": "delete, compact", "min.cleanable.dirty.ratio": "0.01",
                                            "delete.retention.ms": "100", "min.compaction.lag.ms": "5"})
    assert (config.compact, config.delete) == (True, True)
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms, config.min_compaction_lag_ms) == (0.01, 100, 5)
    assert (LogConfig().compact, LogConfig().delete) == (False, True)
    entries = {e.name: e for e in describe_topic_configs(LogConfig(), "t", {"cleanup.policy": "compact"})}
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].overridden) == ("compact", True)
    assert (entries["cleanup.policy"].config_type, entries["min.cleanable.dirty.ratio"].config_type) == (7, 6)
    assert (entries["min.cleanable.dirty.ratio"].value, entries["delete.retention.ms"].value) == ("0.5", "86400000")


def test_topic_config_bounds_are_inclusive():
    config = topic_log_config(LogConfig(), {"segment.bytes": str(2**31 - 1), "retention.bytes": "-5",
                                            "segment.ms": "1", "max.message.bytes": "0"})
    assert (config.segment_bytes, config.retention_bytes, config.segment_ms) == (2**31 - 1, None, 1)


def test_a_stored_topic_config_now_out_of_bounds_is_ignored_not_fatal(tmp_path):
    store = StandaloneMetadata(tmp_path, LOCAL)
    store.create_topic("events", 2, {"retention.ms": "1000"})
    # Written by an older version that accepted a segment size the index positions cannot address.
    path = tmp_path / "__standalone_metadata.json"
    data = json.loads(path.read_text())
    data["topics"]["events"]["configs"]["segment.bytes"] = str(2**31)
    path.write_text(json.dumps(data))
    log_manager = LogManager([tmp_path], LogConfig())
    log_manager.startup()
    try:
        replica_manager = ReplicaManager(log_manager)
        AdminManager(StandaloneMetadata(tmp_path, LOCAL), replica_manager, LogConfig(), 1).host_existing_topics()
        config = replica_manager.get_partition("events", 1).log.config
        assert config.segment_bytes == LogConfig().segment_bytes
        assert config.retention_ms == 1000
    finally:
        log_manager.shutdown()


def test_a_registered_topic_the_broker_cannot_host_is_set_aside_and_start_up_goes_on(tmp_path, caplog):
    store = StandaloneMetadata(tmp_path, LOCAL)
    store.create_topic("events", 2)
    store.create_topic("broken", 1)
    # Written by a version whose name check let a trailing newline through.
    path = tmp_path / "__standalone_metadata.json"
    data = json.loads(path.read_text())
    data["topics"]["evil\n"] = dict(data["topics"]["events"], topic_id="x")
    path.write_text(json.dumps(data))
    (tmp_path / "broken-0").write_text("a file where the partition's directory belongs")
    log_manager = LogManager([tmp_path], LogConfig())
    log_manager.startup()
    try:
        replica_manager = ReplicaManager(log_manager)
        metadata = StandaloneMetadata(tmp_path, LOCAL)
        AdminManager(metadata, replica_manager, LogConfig(), 1).host_existing_topics()
        assert metadata.topic_names() == ["events"]
        assert replica_manager.get_partition("events", 1) is not None
        assert sorted(metadata.set_aside) == ["broken", "evil\n"]
        # The messages, not caplog.text: another test may have left the JSON formatter on the handler.
        messages = " ".join(record.getMessage() for record in caplog.records)
        assert "not hosting topic 'evil\\n'" in messages and "not hosting topic 'broken'" in messages
        # Nothing is lost: the file still names both, and a later start sets them aside again.
        metadata.create_topic("later", 1)
        assert sorted(json.loads(path.read_text())["topics"]) == ["broken", "events", "evil\n", "later"]
        with pytest.raises(FileExistsError):
            metadata.create_topic("broken", 1)
    finally:
        log_manager.shutdown()


def test_metadata_names_the_brokers_at_the_requests_listener(tmp_path):
    from broker.metadata import metadata_response

    local = BrokerEndpoint(0, "127.0.0.1", 9092, (("PLAINTEXT", "127.0.0.1", 9092), ("SSL", "broker0", 9093)))
    metadata = StandaloneMetadata(tmp_path, local)
    assert metadata_response(metadata, [], {}, "SSL")["brokers"] == [
        {"node_id": 0, "host": "broker0", "port": 9093, "rack": None}]
    assert metadata_response(metadata, [], {}, "PLAINTEXT")["brokers"][0]["port"] == 9092
    assert metadata_response(metadata, [], {}, "EXTERNAL")["brokers"] == []
    assert metadata_response(metadata, [], {})["brokers"][0]["port"] == 9092
    # A broker known by one address only is that address on every listener.
    assert BrokerEndpoint(1, "h", 1).on("SSL") == BrokerEndpoint(1, "h", 1)
    assert local.on("SSL") == BrokerEndpoint(0, "broker0", 9093)
