"""High-level consumer pieces without ZooKeeper: stream hand-off across a rebalance, timeouts, configuration."""

from __future__ import annotations

import threading

import pytest

from pipeline.client.consumer_config import ConsumerConnectorConfig
from pipeline.client.consumer_stream import Chunk, ConsumerTimeout, KafkaStream, PartitionTopicInfo
from pipeline.client.producer_config import ProducerConfig
from pipeline.config import ConfigError
from pipeline.records import Record


def records(start: int, n: int) -> list[Record]:
    return [Record(offset, 1000 + offset, b"k", f"v{offset}".encode(), ()) for offset in range(start, start + n)]


def make_stream(timeout_ms: int = 50) -> tuple[KafkaStream, threading.Lock]:
    lock = threading.Lock()
    return KafkaStream("t-0", lock, 4, timeout_ms), lock


def test_a_record_counts_as_consumed_once_the_next_one_is_asked_for() -> None:
    stream, _ = make_stream()
    info = PartitionTopicInfo("t", 3, stream.queue, 10, 1024)
    stream.queue.put(Chunk(info, iter([records(10, 3)])))
    first = next(stream)
    assert (first.topic, first.partition, first.offset, first.value, first.timestamp) == ("t", 3, 10, b"v10", 1010)
    assert info.consumed_offset == 10, "a record still in processing is not committed"
    assert next(stream).offset == 11
    assert info.consumed_offset == 11
    assert next(stream).offset == 12
    with pytest.raises(ConsumerTimeout):
        next(stream)
    assert info.consumed_offset == 13, "asking again, even in vain, finishes the last record"


def test_past_what_read_committed_left_out_the_position_moves_to_the_fetch_s_end_once_its_records_are_done() -> None:
    stream, _ = make_stream()
    info = PartitionTopicInfo("t", 3, stream.queue, 10, 1024)
    # Records 10-11, then a control batch at 12 and an aborted transaction 13-14: the fetch ends at 15.
    stream.queue.put(Chunk(info, iter([records(10, 2)]), 15))
    stream.queue.put(Chunk(info, iter([]), 20))  # a fetch of nothing but markers and aborted batches
    assert [next(stream).offset, next(stream).offset] == [10, 11]
    assert info.consumed_offset == 11 and stream.take_passed() == {}
    with pytest.raises(ConsumerTimeout):
        next(stream)
    assert info.consumed_offset == 20 and stream.take_passed() == {("t", 3): 20}
    assert stream.take_passed() == {}
    # A stream whose application commits its own offsets is told, its consumed offsets left alone.
    own = KafkaStream("t-1", threading.Lock(), 4, 50, acknowledge_on_next=False)
    mine = PartitionTopicInfo("t", 1, own.queue, 0, 1024)
    own.queue.put(Chunk(mine, iter([records(0, 1)]), 3))
    assert next(own).offset == 0
    with pytest.raises(ConsumerTimeout):
        next(own)
    assert own.take_passed() == {("t", 1): 3} and mine.consumed_offset == 0


def test_acknowledge_finishes_the_last_record_without_asking_for_another() -> None:
    stream, _ = make_stream()
    info = PartitionTopicInfo("t", 0, stream.queue, 5, 1024)
    stream.queue.put(Chunk(info, iter([records(5, 2)])))
    next(stream)
    stream.acknowledge()
    assert info.consumed_offset == 6
    stream.acknowledge()
    assert info.consumed_offset == 6, "acknowledging twice changes nothing"


def test_a_released_partition_hands_out_nothing_more() -> None:
    stream, lock = make_stream()
    old = PartitionTopicInfo("t", 0, stream.queue, 0, 1024)
    stream.queue.put(Chunk(old, iter([records(0, 5)])))
    assert next(stream).offset == 0
    with lock:
        old.active = False  # what a rebalance does before committing
    new = PartitionTopicInfo("t", 1, stream.queue, 7, 1024)
    stream.queue.put(Chunk(new, iter([records(7, 1)])))
    assert next(stream).partition == 1, "the rest of the released chunk is dropped"
    assert old.consumed_offset == 1, "the record taken before the release is finished by asking for the next"


def test_idle_stream_raises_consumer_timeout_and_stays_usable() -> None:
    stream, _ = make_stream(timeout_ms=30)
    with pytest.raises(ConsumerTimeout):
        next(stream)
    info = PartitionTopicInfo("t", 0, stream.queue, 0, 1024)
    stream.queue.put(Chunk(info, iter([records(0, 1)])))
    assert next(stream).offset == 0


def test_clear_drops_queued_chunks_and_shutdown_ends_every_iteration() -> None:
    stream, _ = make_stream()
    info = PartitionTopicInfo("t", 0, stream.queue, 0, 1024)
    stream.queue.put(Chunk(info, iter([records(0, 2)])))
    stream.clear()
    with pytest.raises(ConsumerTimeout):
        next(stream)
    for _ in range(4):
        stream.queue.put(Chunk(info, iter([records(0, 1)])))
    stream.shutdown()
    assert list(stream) == []
    with pytest.raises(StopIteration):
        next(stream)


def test_errors_queued_by_the_fetcher_reach_the_reader() -> None:
    stream, _ = make_stream()
    stream.queue.put(ValueError("too large"))
    with pytest.raises(ValueError, match="too large"):
        next(stream)


def test_connector_config_requires_zookeeper_and_group_and_takes_paper_era_names() -> None:
    config = ConsumerConnectorConfig({"zk.connect": "h:2181/dc1", "groupid": "etl", "autocommit.enable": "false",
                                      "autocommit.interval.ms": "250", "fetch.size": "4096"})
    assert config["zookeeper.connect"] == "h:2181/dc1" and config["group.id"] == "etl"
    assert config["auto.commit.enable"] is False and config["auto.commit.interval.ms"] == 250
    assert config["fetch.message.max.bytes"] == 4096 and config["auto.offset.reset"] == "largest"
    with pytest.raises(ConfigError, match="group.id"):
        ConsumerConnectorConfig({"zookeeper.connect": "h:1"})
    with pytest.raises(ConfigError, match="zookeeper.connect"):
        ConsumerConnectorConfig({"group.id": "g"})
    with pytest.raises(ConfigError, match="unknown"):
        ConsumerConnectorConfig({"zookeeper.connect": "h:1", "group.id": "g", "metadata.broker.list": "h:9092"})
    with pytest.raises(ConfigError):
        ConsumerConnectorConfig({"zookeeper.connect": "h:1", "group.id": "g", "auto.commit.interval.ms": "0"})


def test_producer_takes_zookeeper_connect_instead_of_a_broker_list() -> None:
    assert ProducerConfig({"zk.connect": "h:2181/dc1"})["zookeeper.connect"] == "h:2181/dc1"
    assert ProducerConfig({"metadata.broker.list": "h:9092"})["zookeeper.connect"] is None
    with pytest.raises(ConfigError, match="zookeeper.connect"):
        ProducerConfig({})
