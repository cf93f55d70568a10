"""The overrides AlterConfigs and IncrementalAlterConfigs leave a topic with (broker/topic_config_changes.py)."""

from __future__ import annotations

import pytest

from broker.admin_manager import TopicError
from broker.log.log_config import LogConfig
from broker.topic_config_changes import ConfigOperation as Op, incremental_overrides, replaced_overrides
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import CONFIG_OP_APPEND, CONFIG_OP_DELETE, CONFIG_OP_SET, CONFIG_OP_SUBTRACT

DEFAULT = LogConfig()
CURRENT = {"retention.ms": "60000", "segment.bytes": "1048576"}


def refused(code: int, call, *args) -> str:
    with pytest.raises(TopicError) as error:
        call(*args)
    assert error.value.error_code == code
    return str(error.value)


def test_alter_configs_replaces_the_whole_set():
    change = replaced_overrides(DEFAULT, [("cleanup.policy", "compact"), ("retention.ms", "1000")])
    assert change(CURRENT) == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert replaced_overrides(DEFAULT, [])(CURRENT) == {}


def test_alter_configs_refusals_are_raised_before_any_topic_is_read():
    assert "retention.ms" in refused(ErrorCode.INVALID_CONFIG, replaced_overrides, DEFAULT, [("retention.ms", "soon")])
    refused(ErrorCode.INVALID_CONFIG, replaced_overrides, DEFAULT, [("no.such.config", "1")])
    refused(ErrorCode.INVALID_REQUEST, replaced_overrides, DEFAULT, [("retention.ms", None)])
    refused(ErrorCode.INVALID_REQUEST, replaced_overrides, DEFAULT, [("retention.ms", "1"), ("retention.ms", "2")])


def test_set_and_delete_change_only_the_named_configs():
    change = incremental_overrides(DEFAULT, [Op("retention.ms", CONFIG_OP_SET, "1000"),
                                             Op("segment.bytes", CONFIG_OP_DELETE, None),
                                             Op("flush.ms", CONFIG_OP_DELETE, None)])
    assert change(CURRENT) == {"retention.ms": "1000"}
    assert CURRENT == {"retention.ms": "60000", "segment.bytes": "1048576"}  # the caller's dict is left alone


def test_append_and_subtract_start_from_the_value_in_effect():
    append = incremental_overrides(DEFAULT, [Op("cleanup.policy", CONFIG_OP_APPEND, "compact")])
    assert append({}) == {"cleanup.policy": "delete,compact"}  # the default, then the appended value
    assert append({"cleanup.policy": "compact"}) == {"cleanup.policy": "compact"}  # present already
    subtract = incremental_overrides(DEFAULT, [Op("cleanup.policy", CONFIG_OP_SUBTRACT, "delete")])
    assert subtract({"cleanup.policy": "compact,delete"}) == {"cleanup.policy": "compact"}
    # Nothing left is no cleanup policy at all: refused as Kafka refuses an empty list.
    refused(ErrorCode.INVALID_CONFIG, subtract, {})


@pytest.mark.parametrize("operations, code", [
    ([Op("retention.ms", CONFIG_OP_APPEND, "5")], ErrorCode.INVALID_CONFIG),  # not a list
    ([Op("no.such.config", CONFIG_OP_SUBTRACT, "5")], ErrorCode.INVALID_CONFIG),
    ([Op("retention.ms", 9, "5")], ErrorCode.INVALID_REQUEST),  # no such operation
    ([Op("retention.ms", CONFIG_OP_SET, None)], ErrorCode.INVALID_REQUEST),
    ([Op("retention.ms", CONFIG_OP_SET, "1"), Op("retention.ms", CONFIG_OP_DELETE, None)], ErrorCode.INVALID_REQUEST),
])
def test_incremental_refusals_that_need_no_topic(operations, code):
    refused(code, incremental_overrides, DEFAULT, operations)


def test_the_result_is_validated_as_a_whole():
    refused(ErrorCode.INVALID_CONFIG, incremental_overrides(DEFAULT, [Op("segment.bytes", CONFIG_OP_SET, "1")]), {})
    refused(ErrorCode.INVALID_CONFIG, incremental_overrides(DEFAULT, [Op("no.such", CONFIG_OP_SET, "1")]), {})
    # A stored override that is no longer valid has to go in the same change.
    stale = {"min.insync.replicas": "0"}
    keep = incremental_overrides(DEFAULT, [Op("retention.ms", CONFIG_OP_SET, "1")])
    assert "min.insync.replicas" in refused(ErrorCode.INVALID_CONFIG, keep, stale)
    drop = incremental_overrides(DEFAULT, [Op("retention.ms", CONFIG_OP_SET, "1"),
                                           Op("min.insync.replicas", CONFIG_OP_DELETE, None)])
    assert drop(stale) == {"retention.ms": "1"}
