"""FileOffsetStore (offsets of a consumer without a group) and the mirror's broker-list source settings."""

from __future__ import annotations

import pytest

from mirror.config import MirrorConfig
from pipeline.client.consumer_config import ConsumerConnectorConfig, StaticConnectorConfig
from pipeline.client.offset_store import FileOffsetStore, OffsetStoreError, OffsetStoreLocked
from pipeline.config import ConfigError


def test_offsets_round_trip_and_survive_reopening(tmp_path):
    path = tmp_path / "g" / "dc1.offsets.json"
    with FileOffsetStore(path) as store:
        assert store.load() == {}
        store.save({("events", 0): 10, ("events", 1): 7, ("clicks", 0): 0})
        store.save({("events", 0): 12, ("events", 1): 7, ("clicks", 0): 3})
    with FileOffsetStore(path) as store:
        assert store.load() == {("events", 0): 12, ("events", 1): 7, ("clicks", 0): 3}
    assert not path.with_name(path.name + ".tmp").exists()


def test_the_offsets_and_the_directories_made_for_them_are_owner_only(tmp_path):
    import os
    import stat

    path = tmp_path / "state" / "mirror" / "dc1.offsets.json"
    with FileOffsetStore(path) as store:
        store.save({("events", 0): 1})
    for made in (path, path.with_name(path.name + ".lock")):
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o600, made
    for directory in (tmp_path / "state", path.parent):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory


def test_a_second_holder_is_refused_until_the_first_closes(tmp_path):
    path = tmp_path / "dc1.offsets.json"
    first = FileOffsetStore(path)
    with pytest.raises(OffsetStoreLocked, match="in use by another process"):
        FileOffsetStore(path)
    first.close()
    FileOffsetStore(path).close()


def test_a_file_that_is_not_an_offsets_file_is_an_error_not_a_fresh_start(tmp_path):
    path = tmp_path / "dc1.offsets.json"
    path.write_text("{not json")
    with FileOffsetStore(path) as store, pytest.raises(OffsetStoreError, match="not an offsets file"):
        store.load()


BASE = {"target.bootstrap.servers": "t:9092", "whitelist": "ev.*"}


def test_broker_list_sources_need_a_state_dir_and_distinct_names(tmp_path):
    with pytest.raises(ConfigError, match="state.dir"):
        MirrorConfig({**BASE, "source.bootstrap.servers": "dc1=b1:9092,b2:9092"})
    with pytest.raises(ConfigError, match="both by its ZooKeeper and by its brokers"):
        MirrorConfig({**BASE, "source.clusters": "dc1=zk:2181/dc1", "source.bootstrap.servers": "dc1=b1:9092",
                      "state.dir": str(tmp_path)})


def test_each_kind_of_source_gets_the_consumer_properties_its_table_has(tmp_path):
    config = MirrorConfig({**BASE, "source.clusters": "dc1=zk1:2181,zk2:2181/dc1",
                           "source.bootstrap.servers": "dc2=b1:9092,b2:9092", "state.dir": str(tmp_path),
                           "consumer.rebalance.backoff.ms": "700", "consumer.queued.max.message.chunks": "4"})
    assert config.sources == {"dc1": "zk1:2181,zk2:2181/dc1", "dc2": "b1:9092,b2:9092"}
    zookeeper, brokers = config.consumer_config("dc1"), config.consumer_config("dc2")
    assert isinstance(zookeeper, ConsumerConnectorConfig) and zookeeper["rebalance.backoff.ms"] == 700
    assert isinstance(brokers, StaticConnectorConfig) and brokers["metadata.broker.list"] == "b1:9092,b2:9092"
    assert brokers["queued.max.message.chunks"] == zookeeper["queued.max.message.chunks"] == 4
    assert config.offsets_file("dc2") == tmp_path / "mirror" / "dc2.offsets.json"
    with pytest.raises(ConfigError, match="unknown consumer property consumer.nonsense"):
        MirrorConfig({**BASE, "source.clusters": "dc1=zk:2181", "consumer.nonsense": "1"})
