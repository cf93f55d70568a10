"""The standalone broker's topic registry and topic-level config mapping."""

from __future__ import annotations

import pytest

from broker.admin_manager import TopicError, topic_log_config
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


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250, "spaces here", "ünï"])
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


@pytest.mark.parametrize("configs", [{"cleanup.policy.unknown": "x"}, {"retention.ms": "soon"}])
def test_bad_topic_configs(configs):
    with pytest.raises(TopicError) as info:
        topic_log_config(LogConfig(), configs)
    assert info.value.error_code == ErrorCode.INVALID_CONFIG
