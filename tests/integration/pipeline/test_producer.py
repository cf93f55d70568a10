"""Our Producer against a real broker: codecs, sync/async, acks, interop with kcat and kafka-python, queue
limits, callbacks, and a broker restarted mid-run."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.partitioner.default import DefaultPartitioner as KafkaPythonPartitioner

from pipeline.client.errors import DeliveryTimeoutError
from pipeline.client.producer import CallbackHandler, ProduceError, Producer, ProducerData, QueueFullError
from tests.support.clients import create_topic, kafka_python_consume, run_kcat
from tests.support.polling import wait_until


class Recorder(CallbackHandler):
    """Counts what the async pipeline reports at each stage."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.enqueued = 0
        self.before = 0
        self.sent: list = []
        self.failed: list = []

    def on_enqueue(self, data: ProducerData) -> None:
        with self.lock:
            self.enqueued += len(data.messages)

    def before_send(self, batch) -> None:
        with self.lock:
            self.before += batch.count

    def after_send(self, batch, result) -> None:
        with self.lock:
            (self.failed if isinstance(result, BaseException) else self.sent).append((batch, result))

    def count(self, which: list) -> int:
        with self.lock:
            return sum(batch.count for batch, _ in which)


def _messages(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:05d}-".encode() + b"v" * (i % 50) for i in range(n)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_round_trip_per_codec(broker, codec: str, mode: str) -> None:
    create_topic(broker.bootstrap, "codec", 2)
    values = _messages(300, codec)
    recorder = Recorder()
    with Producer({"metadata.broker.list": broker.bootstrap, "compression.codec": codec, "producer.type": mode,
                   "request.required.acks": 1, "batch.size": 40, "queue.time": 20}, recorder) as producer:
        for start in range(0, 300, 30):
            producer.send(ProducerData("codec", f"key-{start}".encode(), values[start:start + 30]))
    if mode == "async":
        assert recorder.enqueued == recorder.before == recorder.count(recorder.sent) == 300
        assert not recorder.failed
        assert all(result.base_offset >= 0 for _, result in recorder.sent)
    records = kafka_python_consume(broker.bootstrap, "codec", [0, 1], 300)
    assert sorted(r.value for r in records) == sorted(values)
    for record in records:
        start = int(record.key.split(b"-")[1])
        assert record.value in values[start:start + 30]


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_sync_acks(broker, acks: int) -> None:
    create_topic(broker.bootstrap, "acks", 1)
    values = _messages(200, f"acks{acks}")
    with Producer({"metadata.broker.list": broker.bootstrap, "request.required.acks": acks}) as producer:
        for value in values:
            producer.send(ProducerData("acks", None, value))
        assert producer.sent_messages == 200 and producer.failed_messages == 0
    records = kafka_python_consume(broker.bootstrap, "acks", [0], 200)
    assert [r.value for r in sorted(records, key=lambda r: r.offset)] == values


def test_kcat_and_kafka_python_read_the_same_bytes_and_partitions(broker) -> None:
    partitions = 5
    create_topic(broker.bootstrap, "interop", partitions)
    keys = [f"user-{i}".encode() for i in range(40)]
    sent = {}
    with Producer({"metadata.broker.list": broker.bootstrap, "request.required.acks": 1}) as producer:
        producer.send([ProducerData("interop", key, [key + b":a", key + b":b"]) for key in keys])
        for key in keys:
            sent[key] = [key + b":a", key + b":b"]
    oracle = KafkaPythonPartitioner()

    class Metadata:
        def topics(self):
            return {"interop"}

        def partitions_for_topic(self, topic):
            return set(range(partitions))

        available_partitions_for_topic = partitions_for_topic

    expected = {(oracle.partition("interop", None, key, None, None, Metadata()), key, value)
                for key, values in sent.items() for value in values}
    theirs = {(r.partition, r.key, r.value) for r in kafka_python_consume(broker.bootstrap, "interop",
                                                                          range(partitions), 80)}
    out = run_kcat(["-b", broker.bootstrap, "-C", "-t", "interop", "-o", "beginning", "-e", "-q",
                    "-f", "%p %k %s\n"])
    kcat = set()
    for line in out.decode().splitlines():
        partition, key, value = line.split(" ")
        kcat.add((int(partition), key.encode(), value.encode()))
    assert theirs == expected
    assert kcat == expected


def test_async_close_loses_nothing(broker) -> None:
    create_topic(broker.bootstrap, "closing", 3)
    recorder = Recorder()
    producer = Producer({"metadata.broker.list": broker.bootstrap, "producer.type": "async", "batch.size": 1000,
                         "queue.time": 60000, "request.required.acks": 1,
                         "serializer.class": "pipeline.client.encoder.StringEncoder"}, recorder)
    for i in range(2500):
        producer.send(ProducerData("closing", None, f"m{i}"))
    producer.close(timeout=30)
    assert recorder.count(recorder.sent) == 2500 and not recorder.failed
    assert producer.sent_messages == 2500
    records = kafka_python_consume(broker.bootstrap, "closing", range(3), 2500)
    assert sorted(r.value for r in records) == sorted(f"m{i}".encode() for i in range(2500))


class Gate(Recorder):
    """Holds the sender thread in before_send until opened."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.waiting = threading.Event()

    def before_send(self, batch) -> None:
        self.waiting.set()
        assert self.open.wait(30)
        super().before_send(batch)


def test_full_queue_raises_or_blocks_as_configured(broker) -> None:
    create_topic(broker.bootstrap, "full", 1)
    gate = Gate()
    producer = Producer({"metadata.broker.list": broker.bootstrap, "producer.type": "async", "batch.size": 2,
                         "queue.time": 1, "queue.buffering.max.messages": 4, "queue.enqueue.timeout.ms": 0,
                         "request.required.acks": 1}, gate)
    try:
        producer.send(ProducerData("full", None, [b"1", b"2"]))
        assert gate.waiting.wait(10)  # the sender holds 2 messages, blocked in before_send
        producer.send(ProducerData("full", None, [b"3", b"4"]))
        with pytest.raises(QueueFullError):
            producer.send(ProducerData("full", None, b"5"))
        # Now a blocking send (-1): it waits until the sender makes room.
        producer._accumulator.enqueue_timeout_ms = -1
        blocked = threading.Thread(target=producer.send, args=(ProducerData("full", None, b"6"),))
        blocked.start()
        blocked.join(0.3)
        assert blocked.is_alive()
        gate.open.set()
        blocked.join(10)
        assert not blocked.is_alive()
    finally:
        gate.open.set()
        producer.close(timeout=30)
    assert gate.count(gate.sent) == 5 and not gate.failed
    records = kafka_python_consume(broker.bootstrap, "full", [0], 5)
    assert sorted(r.value for r in records) == [b"1", b"2", b"3", b"4", b"6"]


def test_sync_sends_retry_across_a_broker_restart(broker) -> None:
    """With the default retry settings (bounded by delivery.timeout.ms, 120 s, not by a count of 3 x 100 ms), a
    broker bounce of over a second costs time, not messages."""
    create_topic(broker.bootstrap, "restart", 1)
    producer = Producer({"metadata.broker.list": broker.bootstrap, "request.required.acks": 1})
    try:
        producer.send(ProducerData("restart", None, b"before"))
        broker.stop()
        stored = []
        restarter = threading.Timer(1.0, broker.start)
        restarter.start()
        for i in range(20):
            producer.send(ProducerData("restart", None, f"during-{i}".encode()))
            stored.append(f"during-{i}".encode())
        restarter.join()
        assert producer._sender.retried_batches > 0
    finally:
        producer.close()
    records = kafka_python_consume(broker.bootstrap, "restart", [0], 21)
    assert {r.value for r in records} == {b"before", *stored}


def test_failures_reach_caller_and_callback_when_the_broker_is_gone(broker) -> None:
    create_topic(broker.bootstrap, "gone", 1)
    sync = Producer({"metadata.broker.list": broker.bootstrap, "request.required.acks": 1,
                     "message.send.max.retries": 2, "retry.backoff.ms": 20})
    recorder = Recorder()
    async_producer = Producer({"metadata.broker.list": broker.bootstrap, "producer.type": "async",
                               "request.required.acks": 1, "batch.size": 10, "queue.time": 10,
                               "message.send.max.retries": 2, "retry.backoff.ms": 20}, recorder)
    try:
        sync.send(ProducerData("gone", None, b"ok"))
        async_producer.send(ProducerData("gone", None, b"ok"))
        wait_until(lambda: recorder.count(recorder.sent) == 1, 10, message="the first async batch")
        broker.stop()
        raised = 0
        for i in range(5):
            with pytest.raises(ProduceError) as info:
                sync.send(ProducerData("gone", b"k", [b"lost-a", b"lost-b"]))
            assert info.value.messages == [b"lost-a", b"lost-b"]
            raised += len(info.value.messages)
        assert raised == sync.failed_messages == 10
        for i in range(25):
            async_producer.send(ProducerData("gone", None, f"x{i}".encode()))
        async_producer.close(timeout=30)
        assert recorder.count(recorder.failed) == 25
        assert async_producer.failed_messages == 25 and async_producer.sent_messages == 1
        assert sorted(m for batch, _ in recorder.failed for m in batch.messages) == sorted(
            f"x{i}".encode() for i in range(25))
    finally:
        sync.close()
        async_producer.close()


def test_a_broker_gone_longer_than_the_delivery_timeout_fails_the_batch_clearly(broker) -> None:
    """Retries go on until delivery.timeout.ms after send() took the messages, then the batch fails for good
    with a DeliveryTimeoutError naming the timeout and the last error -- sync and async alike."""
    create_topic(broker.bootstrap, "expire", 1)
    settings = {"metadata.broker.list": broker.bootstrap, "request.required.acks": 1, "request.timeout.ms": 1000,
                "delivery.timeout.ms": 2000, "retry.backoff.ms": 50}
    sync = Producer(settings)
    recorder = Recorder()
    async_producer = Producer({**settings, "producer.type": "async", "queue.time": 10}, recorder)
    try:
        sync.send(ProducerData("expire", None, b"ok"))
        async_producer.send(ProducerData("expire", None, b"ok"))
        wait_until(lambda: recorder.count(recorder.sent) == 1, 10, message="the first async batch")
        broker.stop()
        started = time.monotonic()
        with pytest.raises(ProduceError) as info:
            sync.send(ProducerData("expire", b"k", [b"late-a", b"late-b"]))
        waited = time.monotonic() - started
        (batch, error), = info.value.failures
        assert isinstance(error, DeliveryTimeoutError), error
        assert "delivery.timeout.ms is 2000" in str(error) and error.last_error is not None
        assert batch.attempts > 3, "retried more often than the old 3 retries allowed"
        assert 1.9 <= waited < 8, waited
        async_producer.send(ProducerData("expire", None, [b"late-c", b"late-d"]))
        wait_until(lambda: recorder.count(recorder.failed) == 2, 15, message="the async batch expired")
        (batch, error), = recorder.failed
        assert isinstance(error, DeliveryTimeoutError) and "delivery.timeout.ms is 2000" in str(error)
        assert batch.messages == [b"late-c", b"late-d"]
    finally:
        sync.close()
        async_producer.close()


class _OffsetRecorder(CallbackHandler):
    """Where the callbacks say each message was stored, and how many batches each drain sent together."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: dict[bytes, int] = {}
        self.drain_sizes: list[int] = []
        self._in_drain = False

    def before_send(self, batch) -> None:
        with self.lock:
            if not self._in_drain:
                self.drain_sizes.append(0)
                self._in_drain = True
            self.drain_sizes[-1] += 1

    def after_send(self, batch, result) -> None:
        assert not isinstance(result, BaseException), result
        with self.lock:
            self._in_drain = False
            for index, message in enumerate(batch.messages):
                self.offsets[message] = result.base_offset + index


@pytest.mark.parametrize("idempotent", [False, True])
def test_async_callbacks_report_each_batch_at_its_own_offset(broker, idempotent: bool) -> None:
    """Several batches of one partition in one drain: each is reported with its own base offset, so every
    message is found at the offset its callback named."""
    create_topic(broker.bootstrap, "offsets", 1)
    values = [f"w-{i}".encode() for i in range(3000)]
    recorder = _OffsetRecorder()
    with Producer({"metadata.broker.list": broker.bootstrap, "producer.type": "async", "batch.size": 20,
                   "queue.time": 50, "request.required.acks": -1,
                   "enable.idempotence": str(idempotent).lower()}, recorder) as producer:
        for value in values:
            producer.send(ProducerData("offsets", None, value, partition=0))
    assert max(recorder.drain_sizes) > 1
    stored = {r.offset: r.value for r in kafka_python_consume(broker.bootstrap, "offsets", [0], len(values))}
    wrong = {value: offset for value, offset in recorder.offsets.items() if stored.get(offset) != value}
    assert len(recorder.offsets) == len(values)
    assert not wrong, f"{len(wrong)} messages misreported, e.g. {list(wrong.items())[:3]}"


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_refused_record_fails_alone_and_the_rest_of_its_batch_is_stored_in_order(broker, idempotent: bool) -> None:
    """A batch the broker refuses for one record (MESSAGE_TOO_LARGE) is sent again one record a batch, as Kafka's
    producer splits it: only that record fails; an idempotent producer numbers the records behind it down over
    the gap and keeps its producer id, so later sends are taken too."""
    from pipeline.protocol.errors import ErrorCode

    create_topic(broker.bootstrap, "refuse", 1, configs={"max.message.bytes": "2000"})
    recorder = Recorder()
    producer = Producer({"metadata.broker.list": broker.bootstrap, "producer.type": "async", "queue.time": 200,
                         "batch.size": 100, "enable.idempotence": idempotent, "request.required.acks": -1},
                        recorder)
    values = [b"a" * 100, b"b" * 100, b"B" * 3000, b"c" * 100, b"d" * 100]
    try:
        producer.send([ProducerData("refuse", None, [value], partition=0) for value in values])
        assert producer.flush(30)
        producer_id = producer._idempotence.producer_id if idempotent else None
        producer.send(ProducerData("refuse", None, [b"e" * 100], partition=0))
        assert producer.flush(30)
        assert [m for batch, _ in recorder.failed for m in batch.messages] == [b"B" * 3000]
        assert all(getattr(error, "code", None) == ErrorCode.MESSAGE_TOO_LARGE for _, error in recorder.failed)
        if idempotent:
            assert producer._idempotence.producer_id == producer_id
    finally:
        producer.close()
    records = kafka_python_consume(broker.bootstrap, "refuse", [0], 5)
    assert [r.value for r in sorted(records, key=lambda r: r.offset)] == [
        b"a" * 100, b"b" * 100, b"c" * 100, b"d" * 100, b"e" * 100]
