"""Every name and value check matches the whole text: `$` in a pattern also matches before a final newline, so
``^...$`` with ``re.match`` let "evil\\n" through as a topic name (issue 26). One case per check that had it."""

from __future__ import annotations

from argparse import ArgumentTypeError

import pytest

from broker.log.log import parse_topic_partition
from broker.server.connection_quotas import parse_overrides
from etl.config import parse_duration
from infra.prometheus.config import Target
from pipeline.client.cluster import parse_broker_list
from pipeline.config import ConfigError
from pipeline.named_clusters import parse_sources
from pipeline.zk.client import split_connect_string
from pipeline.zk.server import parse_peers
from schemas.registry.errors import RegistryError
from schemas.registry.store import parse_version


@pytest.mark.parametrize("name", ["events-0\n", "events\n-0", "events-0\r", "events-\u0661"])
def test_a_log_directory_name_with_a_trailing_newline_or_other_digits_is_no_partition(name):
    assert parse_topic_partition(name) is None


def test_a_log_directory_name_is_still_a_partition():
    assert parse_topic_partition("page-views-12") == ("page-views", 12)


def test_a_duration_with_a_trailing_newline_after_its_unit_still_parses_but_other_digits_do_not():
    assert parse_duration(" 5m \n") == 300.0  # surrounding whitespace is allowed on purpose
    with pytest.raises(ValueError):
        parse_duration("\u0665m")


def test_a_source_name_with_a_newline_is_no_source_name():
    with pytest.raises(ValueError):
        parse_sources("dc1\n=a:1/dc1")


def test_a_connection_override_count_in_other_digits_is_a_config_error():
    with pytest.raises(ConfigError, match="expected host:count"):
        parse_overrides("127.0.0.1:\u00b2")


def test_a_zookeeper_port_or_peer_in_other_digits_is_refused_in_words():
    with pytest.raises(ValueError, match="is not host:port"):
        split_connect_string("zk1:\u00b2\u00b9\u2078\u00b9")
    with pytest.raises(ArgumentTypeError, match="is not ID:PEER_PORT:ELECTION_PORT"):
        parse_peers("1:2888:\u00b3888")


def test_a_broker_port_or_id_in_other_digits_is_refused_in_words():
    with pytest.raises(ValueError, match="is not host:port"):
        parse_broker_list("kafka1:\u00b9\u2070\u2079\u00b2")
    assert parse_broker_list("\u00b9:kafka1:9092") == [("\u00b9:kafka1", 9092)]  # no broker id: kept whole


def test_a_schema_version_in_other_digits_is_an_invalid_version():
    with pytest.raises(RegistryError) as refused:
        parse_version("\u00b2")
    assert (refused.value.status, refused.value.code) == (422, 42202)


def test_a_prometheus_target_port_in_other_digits_is_refused_in_words():
    with pytest.raises(ValueError, match="is not host:port"):
        Target("127.0.0.1:\u00b2")
