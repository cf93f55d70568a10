"""The Producer's per-record headers and timestamps, explicit partitions, and idempotence, against real brokers.

Headers and timestamps are read back by our SimpleConsumer, kafka-python and kcat. Idempotence is proven with a
proxy that lets a Produce request reach the broker but loses its response, so that the producer retries a
request the broker already stored: with enable.idempotence the broker recognises the retry and every message
is stored once; without it the same scenario stores a duplicate, which shows the test can fail.
"""

from __future__ import annotations

import threading

import pytest

from pipeline.client.producer import CallbackHandler, ProduceError, Producer, ProducerData, UnknownPartitionError
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.records import Record
from tests.support.clients import create_topic, kafka_python_consume, run_kcat

BASE_TS = 1_600_000_000_000


def read_partition(host: str, port: int, topic: str, partition: int) -> list[Record]:
    """Every record of one partition, in offset order, with our SimpleConsumer."""
    records: list[Record] = []
    with SimpleConsumer(host, port) as consumer:
        end = consumer.get_offsets_before(topic, partition, -1, 1)[0]
        offset = 0
        while offset < end:
            result = consumer.fetch(FetchRequest(topic, partition, offset, 1 << 20))
            records.extend(result)
            offset = result.next_offset
    return records


def _headers(i: int) -> list[tuple[str, bytes | None]]:
    return [("seq", b"%d" % i), ("origin", b"dc1")] if i % 3 else []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_headers_and_timestamps_round_trip(broker, mode: str) -> None:
    topic = f"headers-{mode}"
    create_topic(broker.bootstrap, topic, 1)
    values = [b"value-%03d" % i for i in range(30)]
    with Producer({"metadata.broker.list": broker.bootstrap, "producer.type": mode, "request.required.acks": 1,
                   "batch.size": 7, "queue.time": 10}) as producer:
        # Ten messages per send: per-message timestamps and headers, one timestamp for all, neither.
        producer.send(ProducerData(topic, b"k", values[:10], timestamps=[BASE_TS + i for i in range(10)],
                                   headers=[_headers(i) for i in range(10)]))
        producer.send(ProducerData(topic, b"k", values[10:20], timestamps=BASE_TS + 500))
        producer.send(ProducerData(topic, None, values[20:], headers=[{"only": b"map"}] * 10))

    ours = read_partition(broker.host, broker.port, topic, 0)
    assert [r.value for r in ours] == values
    assert [r.timestamp for r in ours[:20]] == [BASE_TS + i for i in range(10)] + [BASE_TS + 500] * 10
    assert all(r.timestamp > BASE_TS + 10**9 for r in ours[20:]), "messages without timestamps get the time sent"
    expected_headers = [tuple(_headers(i)) for i in range(10)] + [()] * 10 + [(("only", b"map"),)] * 10
    assert [r.headers for r in ours] == expected_headers

    theirs = kafka_python_consume(broker.bootstrap, topic, [0], 30)
    assert [r.value for r in theirs] == values
    assert [r.timestamp for r in theirs[:20]] == [r.timestamp for r in ours[:20]]
    assert [r.headers for r in theirs] == expected_headers

    lines = run_kcat(["-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                      "-f", "%T|%h|%s\n"]).decode().splitlines()
    assert lines[1] == f"{BASE_TS + 1}|seq=1,origin=dc1|value-001"
    assert lines[3] == f"{BASE_TS + 3}||value-003"
    assert lines[15] == f"{BASE_TS + 500}||value-015"
    assert lines[25].endswith("|only=map|value-025")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_explicit_partition_bypasses_the_partitioner(broker, mode: str) -> None:
    topic = f"explicit-{mode}"
    create_topic(broker.bootstrap, topic, 4)
    with Producer({"metadata.broker.list": broker.bootstrap, "producer.type": mode, "request.required.acks": 1,
                   "queue.time": 10}) as producer:
        for i in range(20):
            # Keys that the partitioner spreads over all four partitions; partition 2 is asked for.
            producer.send(ProducerData(topic, b"key-%d" % i, [b"m-%02d" % i], partition=2))
        with pytest.raises(UnknownPartitionError, match="has no partition 4: it has 4"):
            producer.send(ProducerData(topic, b"k", [b"nowhere"], partition=4))
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 2)] == [b"m-%02d" % i for i in range(20)]
    for partition in (0, 1, 3):
        assert read_partition(broker.host, broker.port, topic, partition) == []


class _Outcomes(CallbackHandler):
    """Collects what the async producer reports and the messages of every batch it sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stored: list = []
        self.failed: list = []

    def after_send(self, batch, result) -> None:
        with self.lock:
            (self.failed if isinstance(result, BaseException) else self.stored).extend(batch.messages)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_lost_produce_response_is_retried_without_duplicates(proxied_broker, mode: str, idempotent: bool) -> None:
    broker, proxy = proxied_broker
    topic = f"lost-{mode}-{idempotent}"
    create_topic(proxy.address, topic, 1)
    values = [b"msg-%03d" % i for i in range(60)]
    outcomes = _Outcomes()
    config = {"metadata.broker.list": proxy.address, "producer.type": mode, "request.required.acks": -1,
              "enable.idempotence": idempotent, "retry.backoff.ms": 10, "batch.size": 5,
              "queue.time": 60000, "request.timeout.ms": 5000}
    with Producer(config, outcomes) as producer:
        # The third Produce request is stored by the broker, but the producer never hears so.
        proxy.lose_produce_responses(1, after=2)
        if mode == "sync":
            for start in range(0, 60, 5):
                producer.send(ProducerData(topic, None, values[start:start + 5]))
        else:
            # Queued at once as twelve batches of five that leave together: several requests in flight.
            producer.send(ProducerData(topic, None, values))
            assert producer.flush(30)
    assert proxy.lost_responses == 1
    if mode == "async":
        assert sorted(outcomes.stored) == values and not outcomes.failed
    if mode == "async" and idempotent:
        # Twelve batches left together, at most max.in.flight.requests.per.connection (5) unanswered at once
        # (the proxy may see fewer, never more, than the producer had unanswered).
        assert 1 <= proxy.most_produce_in_flight <= 5
    stored = [r.value for r in read_partition(broker.host, broker.port, topic, 0)]
    if idempotent:
        assert stored == values
    else:
        assert len(stored) > len(values) and sorted(set(stored)) == values, "the retry stored a duplicate"


def test_idempotent_retries_keep_their_sequence_numbers(proxied_broker) -> None:
    """A request whose response is lost again and again is stored once, and the sends after it follow in order."""
    broker, proxy = proxied_broker
    topic = "lost-several"
    create_topic(proxy.address, topic, 1)
    values = [b"again-%03d" % i for i in range(40)]
    with Producer({"metadata.broker.list": proxy.address, "enable.idempotence": True, "retry.backoff.ms": 10,
                   "message.send.max.retries": 5}) as producer:
        proxy.lose_produce_responses(3, after=1)
        for start in range(0, 40, 4):
            producer.send(ProducerData(topic, b"same-key", values[start:start + 4]))
    assert proxy.lost_responses == 3
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 0)] == values


def test_idempotent_producer_starts_over_after_a_batch_failed_for_good(proxied_broker) -> None:
    """A batch that never reached the broker, retries exhausted, leaves a gap in its partition's sequence numbers;
    the producer takes a new producer id, so the sends after it are stored instead of refused as out of order."""
    broker, proxy = proxied_broker
    topic = "gap"
    create_topic(proxy.address, topic, 1)
    with Producer({"metadata.broker.list": proxy.address, "enable.idempotence": True, "retry.backoff.ms": 10,
                   "message.send.max.retries": 1}) as producer:
        producer.send(ProducerData(topic, None, [b"first-0", b"first-1"]))
        proxy.lose_produce_requests(2)
        with pytest.raises(ProduceError) as failed:
            producer.send(ProducerData(topic, None, [b"lost-0", b"lost-1"]))
        assert failed.value.messages == [b"lost-0", b"lost-1"]
        producer.send(ProducerData(topic, None, [b"after-0"]))
        producer.send(ProducerData(topic, None, [b"after-1"]))
    assert proxy.lost_requests == 2
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 0)] == [
        b"first-0", b"first-1", b"after-0", b"after-1"]
