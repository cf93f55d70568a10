"""Consumer logic with an in-memory cluster: configuration, iteration over partitions, position and seek,
abandoned iterations, offset reset, retries after connection errors, fetch-size doubling, idle timeout."""

from __future__ import annotations

import time
from collections import deque

import pytest

from pipeline.client.consumer import Consumer, ConsumerRecord
from pipeline.client.consumer_config import ConsumerConfig
from pipeline.client.errors import KafkaConnectionError, OffsetOutOfRange
from pipeline.client.simple_consumer import MessageSizeTooLarge
from pipeline.config import ConfigError
from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import iter_batches
from pipeline.protocol.errors import ErrorCode
from tests.unit.pipeline.client.test_simple_consumer import batch, fetch_part


class FakeLog:
    """One partition: its bytes (batches with real offsets) and its log start offset."""

    def __init__(self, data: bytes = b"", log_start: int = 0) -> None:
        self.data = data
        self.log_start = log_start

    @property
    def end(self) -> int:
        ends = [h.next_offset for _, h in iter_batches(self.data)]
        return ends[-1] if ends else self.log_start


class FakeConnection:
    """Pipelined send/receive over FakeLogs; Fetch is cut at partition_max_bytes exactly."""

    def __init__(self, logs: dict[tuple[str, int], FakeLog]) -> None:
        self.logs = logs
        self.pending: deque[dict] = deque()
        self.broker_versions = {ApiKey.FETCH: (4, 11), ApiKey.LIST_OFFSETS: (1, 5)}
        self.fetch_bodies: list[dict] = []
        self.fail_receives = 0
        self.closed = False

    @property
    def in_flight(self) -> int:
        return len(self.pending)

    def connect(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.pending.clear()

    def version(self, api_key: int) -> int:
        return {ApiKey.FETCH: 11, ApiKey.LIST_OFFSETS: 5}[api_key]

    def send(self, api_key: int, body: dict, **_: object) -> int:
        assert api_key == ApiKey.FETCH
        self.fetch_bodies.append(body)
        self.pending.append(body)
        return len(self.fetch_bodies)

    def receive(self) -> tuple[int, dict]:
        body = self.pending.popleft()
        if self.fail_receives:
            self.fail_receives -= 1
            self.close()
            raise KafkaConnectionError("connection reset by peer")
        responses = []
        for topic in body["topics"]:
            parts = []
            for part in topic["partitions"]:
                log = self.logs[(topic["topic"], part["partition"])]
                offset = part["fetch_offset"]
                if not log.log_start <= offset <= log.end:
                    parts.append(fetch_part(None, error=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=log.end,
                                            log_start=log.log_start, partition=part["partition"]))
                    continue
                start = next((p for p, h in iter_batches(log.data) if h.next_offset > offset), len(log.data))
                parts.append(fetch_part(log.data[start:start + part["partition_max_bytes"]], high_watermark=log.end,
                                        log_start=log.log_start, partition=part["partition"], topic=topic["topic"]))
            responses.append({"topic": topic["topic"], "partitions": parts})
        return 0, {"error_code": 0, "responses": responses}

    def request(self, api_key: int, body: dict, *, version: int | None = None) -> dict:
        assert api_key == ApiKey.LIST_OFFSETS and not self.pending
        part = body["topics"][0]["partitions"][0]
        log = self.logs[(body["topics"][0]["name"], part["partition_index"])]
        offset = log.end if part["timestamp"] == -1 else log.log_start
        return {"topics": [{"name": body["topics"][0]["name"], "partitions": [
            {"partition_index": part["partition_index"], "error_code": 0, "offset": offset}]}]}


class FakeCluster:
    """Every partition led by broker 1, served by one FakeConnection."""

    def __init__(self, logs: dict[tuple[str, int], FakeLog]) -> None:
        self.logs = logs
        self.conn = FakeConnection(logs)
        self.invalidations = 0

    def leader(self, topic: str, partition: int) -> int:
        return 1

    def connection(self, node_id: int) -> FakeConnection:
        self.conn.connect()
        return self.conn

    def leader_connection(self, topic: str, partition: int) -> FakeConnection:
        return self.connection(1)

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(p for t, p in self.logs if t == topic)

    def invalidate(self, node_id: int | None = None) -> None:
        self.invalidations += 1

    def close(self) -> None:
        self.conn.close()


def consumer_for(logs: dict, config: dict | None = None, **kwargs: object) -> tuple[Consumer, FakeCluster]:
    cluster = FakeCluster(logs)
    settings = {"consumer.timeout.ms": 50, "fetch.wait.max.ms": 10, "refresh.leader.backoff.ms": 1, **(config or {})}
    return Consumer(settings, cluster=cluster, **kwargs), cluster


def offsets(records: list[ConsumerRecord]) -> list[tuple[str, int, int]]:
    return [(r.topic, r.partition, r.offset) for r in records]


def test_config_accepts_paper_era_names_and_modern_aliases():
    config = ConsumerConfig({"bootstrap.servers": "h:1", "fetch.size": "4096", "auto.offset.reset": "earliest",
                             "fetch.max.wait.ms": 50})
    assert config["metadata.broker.list"] == "h:1" and config["fetch.message.max.bytes"] == 4096
    assert config["auto.offset.reset"] == "smallest" and config["fetch.wait.max.ms"] == 50
    assert ConsumerConfig({"auto.offset.reset": "latest"})["auto.offset.reset"] == "largest"
    with pytest.raises(ConfigError, match="unknown"):
        ConsumerConfig({"fetch.sise": 1})
    with pytest.raises(ConfigError, match="socket.timeout.ms"):
        ConsumerConfig({"socket.timeout.ms": 100, "fetch.wait.max.ms": 100})
    with pytest.raises(ConfigError, match="auto.offset.reset"):
        ConsumerConfig({"auto.offset.reset": "oldest"})
    with pytest.raises(ConfigError, match="fetch.max.bytes"):
        ConsumerConfig({"fetch.message.max.bytes": 4096, "fetch.max.bytes": 1024})


def test_iterates_every_partition_from_its_start_and_ends_when_idle():
    logs = {("t", 0): FakeLog(batch(0, 3) + batch(3, 3)), ("t", 1): FakeLog(batch(0, 2)),
            ("u", 0): FakeLog(batch(0, 4))}
    consumer, _ = consumer_for(logs, partitions={("t", 0): 2, ("t", 1): "earliest", ("u", 0): "latest"})
    got = list(consumer)
    assert sorted(offsets(got)) == [("t", 0, o) for o in range(2, 6)] + [("t", 1, 0), ("t", 1, 1)]
    assert [r.value for r in got if r.partition == 0 and r.topic == "t"] == \
        [f"v{o}".encode().ljust(10, b".") for o in range(2, 6)]
    assert (consumer.position("t", 0), consumer.position("t", 1), consumer.position("u", 0)) == (6, 2, 4)
    logs[("u", 0)].data += batch(4, 2)
    assert offsets(list(consumer)) == [("u", 0, 4), ("u", 0, 5)]


def test_topics_follow_all_partitions_from_the_reset_position():
    logs = {("t", 0): FakeLog(batch(0, 2)), ("t", 1): FakeLog(batch(0, 1))}
    consumer, _ = consumer_for(logs, {"auto.offset.reset": "smallest"}, topics=["t"])
    assert sorted(offsets(list(consumer))) == [("t", 0, 0), ("t", 0, 1), ("t", 1, 0)]
    assert sorted(consumer.assignment()) == [("t", 0), ("t", 1)]


def test_position_follows_each_message_and_an_abandoned_iteration_loses_nothing():
    logs = {("t", 0): FakeLog(batch(0, 4) + batch(4, 4))}
    consumer, _ = consumer_for(logs, partitions={("t", 0): 0})
    taken = []
    for record in consumer:
        taken.append(record.offset)
        assert consumer.position("t", 0) == record.offset + 1
        if record.offset == 5:
            break
    assert consumer.position("t", 0) == 6
    assert [r.offset for r in consumer] == [6, 7]
    assert taken == [0, 1, 2, 3, 4, 5]


def test_seek_in_the_middle_of_an_iteration_restarts_there():
    logs = {("t", 0): FakeLog(batch(0, 5) + batch(5, 5))}
    consumer, _ = consumer_for(logs, partitions={("t", 0): 0})
    seen = []
    for record in consumer:
        seen.append(record.offset)
        if record.offset == 3 and len(seen) == 4:
            consumer.seek("t", 0, 8)
    assert seen == [0, 1, 2, 3, 8, 9]
    consumer.seek("t", 0, "earliest")
    assert consumer.position("t", 0) == 0
    with pytest.raises(ValueError):
        consumer.seek("t", 9, 0)


@pytest.mark.parametrize("reset,expected", [("smallest", [4, 5, 6]), ("largest", [])])
def test_out_of_range_offsets_restart_per_auto_offset_reset(reset, expected):
    logs = {("t", 0): FakeLog(batch(4, 3), log_start=4)}
    consumer, _ = consumer_for(logs, {"auto.offset.reset": reset}, partitions={("t", 0): 1})
    assert [r.offset for r in consumer] == expected
    assert consumer.position("t", 0) == 7


def test_out_of_range_with_reset_none_raises():
    logs = {("t", 0): FakeLog(batch(0, 3))}
    consumer, _ = consumer_for(logs, {"auto.offset.reset": "none"}, partitions={("t", 0): 10})
    with pytest.raises(OffsetOutOfRange) as caught:
        list(consumer)
    assert (caught.value.log_start_offset, caught.value.high_watermark) == (0, 3)


def test_a_broken_connection_refreshes_metadata_and_retries():
    logs = {("t", 0): FakeLog(batch(0, 3))}
    consumer, cluster = consumer_for(logs, partitions={("t", 0): 0})
    cluster.conn.fail_receives = 2
    assert [r.offset for r in consumer] == [0, 1, 2]
    assert cluster.invalidations >= 2


def test_a_batch_larger_than_the_fetch_size_is_fetched_with_doubled_sizes():
    logs = {("t", 0): FakeLog(batch(0, 10, size=300) + batch(10, 1))}
    consumer, cluster = consumer_for(logs, {"fetch.message.max.bytes": 512, "fetch.max.bytes": 8192},
                                     partitions={("t", 0): 0})
    assert [r.offset for r in consumer] == list(range(11))
    sizes = [b["topics"][0]["partitions"][0]["partition_max_bytes"] for b in cluster.conn.fetch_bodies]
    assert sizes[:4] == [512, 1024, 2048, 4096] and sizes[4] == 512

    tight, _ = consumer_for(logs, {"fetch.message.max.bytes": 512, "fetch.max.bytes": 1024},
                            partitions={("t", 0): 0})
    with pytest.raises(MessageSizeTooLarge):
        list(tight)


def test_consumer_timeout_ends_an_idle_iteration_and_close_ends_all():
    logs = {("t", 0): FakeLog()}
    consumer, cluster = consumer_for(logs, {"consumer.timeout.ms": 200}, partitions={("t", 0): "earliest"})
    started = time.monotonic()
    assert list(consumer) == []
    assert 0.2 <= time.monotonic() - started < 5
    consumer.close()
    assert list(consumer) == [] and cluster.conn.closed


class LeaderlessCluster(FakeCluster):
    """Like FakeCluster, but some partitions have no leader until given one."""

    def __init__(self, logs: dict[tuple[str, int], FakeLog], leaderless: set[tuple[str, int]]) -> None:
        super().__init__(logs)
        self.leaderless = leaderless

    def leader(self, topic: str, partition: int) -> int:
        return -1 if (topic, partition) in self.leaderless else 1


def test_a_leaderless_partition_pauses_alone_and_the_others_keep_flowing():
    logs = {("t", 0): FakeLog(batch(0, 3)), ("t", 1): FakeLog(batch(0, 2))}
    cluster = LeaderlessCluster(logs, {("t", 1)})
    # A generous timeout: each next() below has a record coming, and must not give up on a loaded machine.
    consumer = Consumer({"consumer.timeout.ms": 10_000, "fetch.wait.max.ms": 10, "refresh.leader.backoff.ms": 50},
                        cluster=cluster, partitions={("t", 0): 0, ("t", 1): 0})
    records = iter(consumer)
    assert [(r.partition, r.offset) for r in (next(records), next(records), next(records))] == \
        [(0, 0), (0, 1), (0, 2)], "partition 0 is read while partition 1 has no leader"
    assert cluster.invalidations >= 1, "the missing leader makes the metadata be looked up again"
    logs[("t", 0)].data += batch(3, 1)
    assert (next(records).partition, consumer.position("t", 1)) == (0, 0)
    cluster.leaderless.clear()
    assert sorted((r.partition, r.offset) for r in (next(records), next(records))) == [(1, 0), (1, 1)]
