"""Producer pieces without a broker: encoders, configuration, the async accumulator, request encoding, splitting."""

from __future__ import annotations

import logging
import math
import threading

import pytest

from pipeline.client.accumulator import QueueFullError, RecordAccumulator
from pipeline.client.encoder import DefaultEncoder, Encoder, StringEncoder, load_instance
from pipeline.client.partitioner import DefaultPartitioner, Partitioner
from pipeline.client.producer import CallbackHandler, MessageSizeTooLargeError, Producer, ProducerData, _TopicState
from pipeline.client.producer_config import ProducerConfig
from pipeline.client.errors import DeliveryTimeoutError
from pipeline.client.sender import ProducerBatch, Sender, _rounds, encode_produce_request
from pipeline.config import ConfigError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import encode_request
from pipeline.protocol.compression import GZIP
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.records import decode_records, encode_batch
from tests.support.polling import wait_until

BROKERS = {"metadata.broker.list": "127.0.0.1:1"}


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- encoders ------------------------------------------------------------------------------------

def test_default_encoder_passes_bytes_and_rejects_str() -> None:
    encoder = DefaultEncoder()
    assert encoder.encode(b"abc") == b"abc"
    assert encoder.encode(bytearray(b"xy")) == b"xy"
    assert encoder.encode(None) is None
    values = [b"a", b"b"]
    assert encoder.encode_all(values) is values
    assert encoder.encode_all((b"a", memoryview(b"b"))) == [b"a", b"b"]
    with pytest.raises(TypeError, match="StringEncoder"):
        encoder.encode("text")
    with pytest.raises(TypeError):
        encoder.encode_all([b"a", "text"])


def test_string_encoder_utf8() -> None:
    encoder = StringEncoder()
    assert encoder.encode("héllo") == "héllo".encode()
    assert encoder.encode(b"raw") == b"raw"
    assert encoder.encode(None) is None
    assert encoder.encode_all(["a", "b"]) == [b"a", b"b"]
    with pytest.raises(TypeError):
        encoder.encode(12)


def test_load_instance_from_path_instance_or_class() -> None:
    assert isinstance(load_instance("pipeline.client.encoder.StringEncoder", Encoder, "x"), StringEncoder)
    mine = StringEncoder("latin-1")
    assert load_instance(mine, Encoder, "x") is mine
    assert isinstance(load_instance(DefaultPartitioner, Partitioner, "x"), DefaultPartitioner)
    with pytest.raises(ValueError, match="cannot be loaded"):
        load_instance("pipeline.client.encoder.Nope", Encoder, "x")
    with pytest.raises(ValueError, match="dotted path"):
        load_instance("Nope", Encoder, "x")


# -- configuration -------------------------------------------------------------------------------

def test_config_aliases_and_derived_values(tmp_path) -> None:
    config = ProducerConfig({"bootstrap.servers": "h:1", "acks": "all", "compression.type": "gzip",
                             "batch.num.messages": "50", "queue.buffering.max.ms": "20", "retries": 0})
    assert config["metadata.broker.list"] == "h:1"
    assert config.acks == -1 and config.compression == GZIP and config.batch_size == 50
    assert config.linger_s == pytest.approx(0.02) and config.retries == 0
    path = tmp_path / "producer.properties"
    path.write_text("metadata.broker.list=h:2\nproducer.type=async\nrequest.required.acks=1\n")
    from_file = ProducerConfig(str(path))
    assert from_file.is_async and from_file.acks == 1


def test_retries_are_bounded_by_the_delivery_timeout_as_in_kafka() -> None:
    config = ProducerConfig(BROKERS)
    assert config.retries == 2**31 - 1 and config.delivery_timeout_s == 120.0
    # Left at its default, it grows to cover the linger and one request (Kafka's adjustment); given, it is checked.
    long = ProducerConfig({**BROKERS, "producer.type": "async", "linger.ms": 100_000, "request.timeout.ms": 30_000})
    assert long.delivery_timeout_s == 130.0
    assert ProducerConfig({**BROKERS, "delivery.timeout.ms": 10_000}).delivery_timeout_s == 10.0
    with pytest.raises(ConfigError, match=r"delivery.timeout.ms=6000 must be at least queue.time \(linger.ms\) 5000 "
                                          r"\+ request.timeout.ms 10000 = 15000"):
        ProducerConfig({**BROKERS, "producer.type": "async", "delivery.timeout.ms": 6000})
    with pytest.raises(ConfigError, match=r"delivery.timeout.ms=500 must be at least request.timeout.ms 1000 = 1000"):
        ProducerConfig({**BROKERS, "request.timeout.ms": 1000, "delivery.timeout.ms": 500})


@pytest.mark.parametrize("values, message", [
    ({}, "metadata.broker.list"),
    ({**BROKERS, "acks": "2"}, "request.required.acks"),
    ({**BROKERS, "acks": "many"}, "acks"),
    ({**BROKERS, "compression.codec": "brotli"}, "compression.codec"),
    ({**BROKERS, "producer.type": "later"}, "producer.type"),
    ({**BROKERS, "batch.size": 0}, "batch.size"),
    ({**BROKERS, "queue.enqueue.timeout.ms": -5}, "queue.enqueue.timeout.ms"),
    ({**BROKERS, "retries": -1}, "message.send.max.retries"),
    ({**BROKERS, "no.such.thing": 1}, "no.such.thing"),
    ({**BROKERS, "acks": 1, "request.required.acks": 1}, "give only one"),
])
def test_config_errors(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig(values)


def test_bad_serializer_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="serializer.class"):
        Producer({**BROKERS, "serializer.class": "no.such.Encoder"})


# -- accumulator ---------------------------------------------------------------------------------

def test_accumulator_cuts_batches_by_count() -> None:
    clock = FakeClock()
    acc = RecordAccumulator(batch_size=3, linger_s=10.0, max_messages=100, enqueue_timeout_ms=-1, clock=clock)
    acc.append("t", 0, b"k", [b"1", b"2"], ["1", "2"])
    assert acc.drain() == []
    acc.append("t", 0, None, [b"3", b"4", b"5", b"6", b"7"], list("34567"))
    acc.append("t", 1, None, [b"x"], ["x"])
    ready = acc.drain()
    assert [(b.partition, b.values) for b in ready] == [(0, [b"1", b"2", b"3"]), (0, [b"4", b"5", b"6"])]
    assert ready[0].keys == [b"k", b"k", None] and ready[0].messages == ["1", "2", "3"]
    assert acc.queued == 8
    clock.now += 10.0
    assert sorted((b.partition, b.values) for b in acc.drain()) == [(0, [b"7"]), (1, [b"x"])]


def test_accumulator_cuts_batches_by_time() -> None:
    clock = FakeClock()
    acc = RecordAccumulator(batch_size=100, linger_s=0.5, max_messages=100, enqueue_timeout_ms=-1, clock=clock)
    acc.append("t", 0, None, [b"a"], ["a"])
    clock.now += 0.3
    acc.append("t", 1, None, [b"b"], ["b"])
    assert acc.next_deadline() == pytest.approx(100.5)
    clock.now += 0.2
    assert [b.values for b in acc.drain()] == [[b"a"]]
    assert acc.drain() == []
    clock.now += 0.3
    assert [b.values for b in acc.drain()] == [[b"b"]]
    assert acc.next_deadline() is None


def test_a_broker_with_a_batch_due_is_sent_every_batch_queued_for_it() -> None:
    """Kafka's drain: one lingered (or full) batch for a broker takes that broker's other open batches along, so
    a broker gets one request per linger, not one per partition whose batch happens to be due; batches for other
    brokers, or for partitions not routed yet, keep lingering."""
    clock = FakeClock()
    acc = RecordAccumulator(batch_size=2, linger_s=0.5, max_messages=100, enqueue_timeout_ms=-1, clock=clock)
    leaders = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2, ("u", 0): 1}

    def node_of(topic: str, partition: int) -> int | None:
        return leaders.get((topic, partition))

    acc.append("t", 0, None, [b"a"], ["a"])
    clock.now += 0.3
    for topic, partition in (("t", 1), ("t", 2), ("t", 3), ("u", 0)):
        acc.append(topic, partition, None, [b"b"], ["b"])
    clock.now += 0.2
    assert sorted((b.topic, b.partition) for b in acc.drain(node_of=node_of)) == [("t", 0), ("t", 1), ("u", 0)]
    assert acc.drain(node_of=node_of) == []
    acc.append("t", 2, None, [b"c"], ["c"])  # a full batch for broker 2 takes nothing of broker 1's along
    acc.append("t", 0, None, [b"d"], ["d"])
    assert sorted((b.topic, b.partition) for b in acc.drain(node_of=node_of)) == [("t", 2)]
    assert sorted((b.topic, b.partition) for b in acc.drain()) == []
    clock.now += 0.3
    assert sorted((b.topic, b.partition) for b in acc.drain()) == [("t", 3)]


def test_accumulator_flush_and_close_drain_everything() -> None:
    acc = RecordAccumulator(batch_size=100, linger_s=60.0, max_messages=100, enqueue_timeout_ms=-1, clock=FakeClock())
    acc.append("t", 0, None, [b"a"], ["a"])
    acc.begin_flush()
    assert [b.values for b in acc.drain()] == [[b"a"]]
    acc.end_flush()
    acc.append("t", 0, None, [b"b"], ["b"])
    assert acc.drain() == []
    acc.close()
    assert [b.values for b in acc.wait_for_batches(0.0)] == [[b"b"]]


def test_full_queue_raises_at_once_with_timeout_zero() -> None:
    acc = RecordAccumulator(batch_size=10, linger_s=1.0, max_messages=3, enqueue_timeout_ms=0)
    acc.append("t", 0, None, [b"1", b"2", b"3"], [1, 2, 3])
    with pytest.raises(QueueFullError):
        acc.append("t", 0, None, [b"4"], [4])
    with pytest.raises(QueueFullError, match="never fit"):
        acc.append("t", 0, None, [b"x"] * 4, [0] * 4)
    acc.release(3)
    acc.append("t", 0, None, [b"4"], [4])
    assert acc.queued == 1


def test_full_queue_waits_then_raises() -> None:
    acc = RecordAccumulator(batch_size=10, linger_s=1.0, max_messages=1, enqueue_timeout_ms=50)
    acc.append("t", 0, None, [b"1"], [1])
    with pytest.raises(QueueFullError, match="50 ms"):
        acc.append("t", 0, None, [b"2"], [2])
    assert acc.queued == 1


def test_full_queue_blocks_until_room() -> None:
    acc = RecordAccumulator(batch_size=10, linger_s=1.0, max_messages=1, enqueue_timeout_ms=-1)
    acc.append("t", 0, None, [b"1"], [1])
    done = threading.Event()

    def blocked_append() -> None:
        acc.append("t", 0, None, [b"2"], [2])
        done.set()

    thread = threading.Thread(target=blocked_append)
    thread.start()
    assert not done.wait(0.2)
    acc.release(1)
    assert done.wait(5.0)
    thread.join(5.0)
    assert acc.queued == 1


# -- request encoding ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [3, 5, 7, 8])
def test_produce_request_matches_generic_codec(version: int) -> None:
    b1, b2, b3 = encode_batch([b"a"]), encode_batch([b"bb", b"c"], [b"k", None]), encode_batch([b"z" * 300])
    topics = {"one": [(0, b1), (3, b2)], "two": [(1, b3)]}
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 1234,
            "topic_data": [{"name": name, "partition_data": [{"index": p, "records": r} for p, r in parts]}
                           for name, parts in topics.items()]}
    expected = encode_request(ApiKey.PRODUCE, version, 77, "client-x", body)
    assert encode_produce_request(version, 77, "client-x", -1, 1234, topics) == expected


def test_rounds_name_each_partition_once_per_request() -> None:
    batches = [ProducerBatch("t", p, None, [], b"", 1) for p in (0, 0, 1, 0, 2)]
    rounds = _rounds(batches)
    assert [[b.partition for b in r] for r in rounds] == [[0, 1, 2], [0], [0]]
    assert [b for r in rounds for b in r if b.partition == 0] == [batches[0], batches[1], batches[3]]


# -- partitioning and splitting (no broker: the partition count is planted) ------------------------

def _offline_producer(**extra: object) -> Producer:
    producer = Producer({**BROKERS, **extra})
    producer._topics["t"] = _TopicState(4, math.inf)
    return producer


def test_batches_use_key_partition_and_store_key() -> None:
    producer = _offline_producer(**{"serializer.class": "pipeline.client.encoder.StringEncoder",
                                    "key.serializer.class": StringEncoder()})
    [batch] = producer._batches(ProducerData("t", "user-1", ["a", "b"]))
    assert batch.partition == DefaultPartitioner().partition(b"user-1", 4)
    records, _ = decode_records(batch.records)
    assert [(r.key, r.value) for r in records] == [(b"user-1", b"a"), (b"user-1", b"b")]
    producer.close()


def test_batches_split_to_fit_max_request_size() -> None:
    producer = _offline_producer(**{"max.request.size": 2000, "compression.codec": "none"})
    values = [bytes([i]) * 300 for i in range(20)]
    batches = producer._batches(ProducerData("t", b"k", values))
    assert len(batches) > 3
    frames = [encode_produce_request(8, 1, producer.config.client_id, 0, 10000, {"t": [(b.partition, b.records)]})
              for b in batches]
    assert all(len(frame) <= 2000 for frame in frames)
    assert [r.value for b in batches for r in decode_records(b.records)[0]] == values
    assert len({b.partition for b in batches}) == 1
    producer.close()


def test_single_message_over_max_request_size_is_an_error() -> None:
    producer = _offline_producer(**{"max.request.size": 1000})
    with pytest.raises(MessageSizeTooLargeError) as info:
        producer._batches(ProducerData("t", None, [b"small", b"x" * 2000]))
    assert info.value.messages == [b"x" * 2000]
    producer.close()


def test_producer_data_accepts_a_single_message() -> None:
    assert ProducerData("t", None, b"one").messages == [b"one"]
    assert ProducerData("t", None, "text").messages == ["text"]
    assert ProducerData("t", None, (b"a", b"b")).messages == [b"a", b"b"]


class _TopicTaggingEncoder(Encoder):
    """Writes the topic into every value, as an encoder whose schema depends on the topic does."""

    def encode(self, message: object) -> bytes:
        raise AssertionError("the producer must call encode_for(topic, messages)")

    def encode_for(self, topic: str, messages: list) -> list:
        return [f"{topic}:{m}".encode() for m in messages]


def test_encoder_is_told_the_topic_sync_and_async() -> None:
    producer = _offline_producer(**{"serializer.class": _TopicTaggingEncoder()})
    [batch] = producer._batches(ProducerData("t", None, ["a", "b"]))
    assert [r.value for r in decode_records(batch.records)[0]] == [b"t:a", b"t:b"]
    producer.close()
    producer = _offline_producer(**{"serializer.class": _TopicTaggingEncoder(), "producer.type": "async",
                                    "queue.time": 60000, "batch.size": 1000})
    producer._topics["t"] = _TopicState(4, math.inf)
    producer.send(ProducerData("t", None, ["c"]))
    [pending] = producer._accumulator.abort()
    assert pending.values == [b"t:c"]
    producer.close()


def test_close_that_times_out_leaves_no_sender_thread_behind() -> None:
    # Nothing listens on 127.0.0.1:1: the sender is busy failing and retrying when close() gives up.
    failed: list[int] = []
    sending = threading.Event()

    class Recorder(CallbackHandler):
        def before_send(self, batch: object) -> None:
            sending.set()

        def after_send(self, batch: object, result: object) -> None:
            failed.append(batch.count)

    producer = Producer({**BROKERS, "producer.type": "async", "queue.time": 0, "message.send.max.retries": 50,
                         "retry.backoff.ms": 50}, Recorder())
    producer._topics["t"] = _TopicState(4, math.inf)
    producer.send(ProducerData("t", None, [b"a", b"b"]))
    assert sending.wait(10)
    # Still queued when close() gives up: close() reports it, the sender must not wait for it.
    producer.send(ProducerData("t", None, [b"c"]))
    with pytest.raises(TimeoutError):
        producer.close(timeout=0.05)
    wait_until(lambda: not producer._thread.is_alive(), timeout=30, message="sender thread to end")
    assert sum(failed) == 3
    assert producer._released


# -- retries -------------------------------------------------------------------------------------

class _LeaderlessCluster:
    """A cluster whose partitions have no leader: every send fails retriably."""

    def leader_connection(self, topic: str, partition: int) -> None:
        raise KafkaProtocolError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {topic}-{partition}")

    def invalidate(self, node_id: int | None = None) -> None:
        pass

    def refresh(self, topics: list[str]) -> None:
        pass


def test_retries_are_logged_with_their_error_partitions_attempt_and_time_left(caplog) -> None:
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        clock.now += seconds

    sender = Sender(_LeaderlessCluster(), client_id="emulator-1", acks=-1, timeout_ms=1000,  # type: ignore[arg-type]
                    retries=2**31 - 1, retry_backoff_s=0.125, delivery_timeout_s=30.0, sleep=sleep, clock=clock)
    batches = [ProducerBatch("events", partition, None, [b"m"], b"", 1, clock.now) for partition in (3, 0)]
    with caplog.at_level(logging.WARNING, logger="pipeline.client.sender"):
        failures, stored = sender.send(batches)
    assert stored == [] and {type(e) for _, e in failures} == {DeliveryTimeoutError}
    lines = caplog.messages
    assert lines[0] == ("producer emulator-1: retrying 2 batch(es) for events-0, events-3 in 125 ms after attempt 1 "
                        "failed (30.0 s of delivery.timeout.ms left): KafkaProtocolError: LEADER_NOT_AVAILABLE: no "
                        "leader for events-3")
    # 240 retries in 30 s, one line every RETRY_WARNING_INTERVAL_S (10 s) with the count of those held back.
    assert len(lines) == 3, lines
    assert "after attempt 81 failed (20.0 s of delivery.timeout.ms left)" in lines[1]
    assert lines[1].endswith("(and 79 more LEADER_NOT_AVAILABLE warning(s) from emulator-1 in the last 10s, not "
                             "logged)")
    assert sender.retry_warnings.counts == {"LEADER_NOT_AVAILABLE": sender.retried_batches // 2}
