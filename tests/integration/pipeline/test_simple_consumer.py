"""SimpleConsumer against the real broker: multifetch in one request, getOffsetsBefore over segments,
OffsetOutOfRange below the log start (after retention) and past the end, doubling fetch sizes, partial tails."""

from __future__ import annotations

import pytest

from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import OffsetOutOfRange
from pipeline.client.simple_consumer import FetchRequest, MessageSizeTooLarge, SimpleConsumer
from pipeline.protocol.api_keys import ApiKey
from pipeline.records import encode_batch
from tests.support import wait_until
from tests.support.clients import create_topic
from tests.support.segments import scan_partition
from tests.support.wire import KafkaConnection, produce

T0 = 1_600_000_000_000


class CountingConnection(BrokerConnection):
    """A BrokerConnection that counts the requests it sends, per API key."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.sent: dict[int, int] = {}

    def send(self, api_key: int, body: dict, **kwargs: object) -> int:
        self.sent[api_key] = self.sent.get(api_key, 0) + 1
        return super().send(api_key, body, **kwargs)


def produce_values(broker, topic: str, partition: int, batches: list[list[bytes]], timestamps: list[int] | None = None,
                   ) -> int:
    """Produce each list of values as one batch; return the next offset."""
    next_offset = 0
    with KafkaConnection(broker.host, broker.port) as conn:
        for i, values in enumerate(batches):
            ts = None if timestamps is None else timestamps[i]
            result = produce(conn, topic, partition, encode_batch(values, timestamp=ts))
            assert result.error_code == 0, result.error_code
            next_offset = result.base_offset + len(values)
    return next_offset


def consumer_for(broker, **kwargs: object) -> SimpleConsumer:
    connection = CountingConnection(broker.host, broker.port, client_id="test-simple")
    return SimpleConsumer(broker.host, broker.port, connection=connection, **kwargs)


def test_multifetch_serves_several_partitions_in_one_request(broker):
    create_topic(broker.bootstrap, "multi", 3)
    for p in range(3):
        produce_values(broker, "multi", p, [[f"p{p}-{i}".encode() for i in range(p + 2)]])
    with consumer_for(broker) as consumer:
        results = consumer.multifetch([FetchRequest("multi", 2, 1), FetchRequest("multi", 0, 0),
                                       FetchRequest("multi", 1, 0, 4096)])
        assert consumer.connection.sent[ApiKey.FETCH] == 1
    assert [(r.partition, [m.value for m in r]) for r in results] == [
        (2, [b"p2-1", b"p2-2", b"p2-3"]), (0, [b"p0-0", b"p0-1"]), (1, [b"p1-0", b"p1-1", b"p1-2"])]
    assert [(r.next_offset, r.high_watermark) for r in results] == [(4, 4), (2, 2), (3, 3)]


def test_get_offsets_before_walks_segments_newest_first(broker_factory):
    broker = broker_factory(overrides={"log.segment.bytes": 4096})
    create_topic(broker.bootstrap, "segmented", 1)
    batches = [[f"b{b}r{r}".encode().ljust(300, b".") for r in range(4)] for b in range(12)]
    end = produce_values(broker, "segmented", 0, batches, [T0 + 1000 * b for b in range(12)])
    segments = scan_partition(broker.log_dir / "segmented-0")
    assert len(segments) >= 3
    bases = [s.batches[0].base_offset for s in segments]
    newest = [max(h.max_timestamp for h in s.batches) for s in segments]
    with consumer_for(broker) as consumer:
        latest = consumer.get_offsets_before("segmented", 0, -1, 100)
        assert latest == [end] + bases[::-1]
        assert consumer.get_offsets_before("segmented", 0, -1, 2) == [end, bases[-1]]
        assert consumer.get_offsets_before("segmented", 0, -2, 10) == [0]
        # A time after the second segment was last written but before the third was.
        assert consumer.get_offsets_before("segmented", 0, newest[1], 10) == [bases[1], bases[0]]
        assert consumer.get_offsets_before("segmented", 0, newest[1] + 1, 1) == [bases[1]]
        assert consumer.get_offsets_before("segmented", 0, T0 - 1, 10) == []
        assert consumer.connection.versions[ApiKey.LIST_OFFSETS] >= 1


def test_offsets_outside_the_log_raise_offset_out_of_range(broker_factory):
    broker = broker_factory(overrides={"log.segment.bytes": 8192, "log.retention.bytes": 16384,
                                       "log.retention.check.interval.ms": 200})
    create_topic(broker.bootstrap, "retained", 1)
    end = produce_values(broker, "retained", 0, [[f"b{b}r{r}".encode().ljust(400, b".") for r in range(5)]
                                                 for b in range(60)])
    with consumer_for(broker) as consumer:
        start = wait_until(lambda: consumer.get_offsets_before("retained", 0, -2, 1)[0], timeout=20,
                           message="retention to delete the oldest segments")
        with pytest.raises(OffsetOutOfRange) as below:
            consumer.fetch(FetchRequest("retained", 0, 0))
        assert (below.value.log_start_offset, below.value.high_watermark) == (start, end)
        with pytest.raises(OffsetOutOfRange) as above:
            consumer.fetch(FetchRequest("retained", 0, end + 5))
        assert (above.value.offset, above.value.log_start_offset, above.value.high_watermark) == (end + 5, start, end)
        first = consumer.fetch(FetchRequest("retained", 0, start, 2048))
        assert next(iter(first)).offset == start
        assert consumer.fetch(FetchRequest("retained", 0, end)).next_offset == end


def test_a_batch_larger_than_the_fetch_size_is_fetched_by_doubling(broker):
    create_topic(broker.bootstrap, "big", 2)
    produce_values(broker, "big", 0, [[b"small"]])
    big = [bytes([65 + i]) * 1000 for i in range(5)]
    produce_values(broker, "big", 1, [big])
    requests = [FetchRequest("big", 0, 0), FetchRequest("big", 1, 0)]
    # The broker returns a whole oversized batch only for the first partition of a response; the
    # second one here gets 1024 bytes of a ~5 KB batch and must be fetched again with more room.
    with consumer_for(broker, buffer_size=1024, max_buffer_size=16384) as consumer:
        small_set, big_set = consumer.multifetch(requests)
        assert [m.value for m in small_set] == [b"small"]
        assert [m.value for m in big_set] == big
        assert consumer.connection.sent[ApiKey.FETCH] >= 2
    with consumer_for(broker, buffer_size=1024, max_buffer_size=1024) as consumer:
        with pytest.raises(MessageSizeTooLarge):
            consumer.multifetch(requests)


def test_a_partial_batch_at_the_end_of_a_fetch_is_fetched_next_time(broker):
    create_topic(broker.bootstrap, "tail", 1)
    batches = [[f"b{b}r{r}".encode().ljust(200, b"-") for r in range(3)] for b in range(3)]
    produce_values(broker, "tail", 0, batches)
    first_batch = len(encode_batch(batches[0], timestamp=0))
    with consumer_for(broker) as consumer:
        cut = consumer.fetch(FetchRequest("tail", 0, 1, first_batch + 100))
        assert [m.offset for m in cut] == [1, 2] and cut.next_offset == 3
        rest = consumer.fetch(FetchRequest("tail", 0, cut.next_offset))
        assert [m.value for m in rest] == batches[1] + batches[2]
