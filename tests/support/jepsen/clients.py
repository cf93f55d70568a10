"""The clients of a Jepsen-style run, each recording into a History.

Writers (``ConfluentWriter``: confluent-kafka; ``PipelineWriter``: the project's async Producer) send unique
values with acks=all and idempotence to an explicit partition and record sends, acknowledgements (with the
offset) and failures. ``Reader`` follows every partition from its start with the project's Consumer on a
thread (with the consumer properties it is given: read_committed, say) and records each message it reads with
its offset. ``read_final`` reads whole partitions after a run.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Protocol

from confluent_kafka import KafkaError, Message, Producer as ConfluentProducer

from pipeline.client.admin import AdminClient
from pipeline.client.consumer import Consumer
from pipeline.client.errors import KafkaClientError
from pipeline.client.producer import CallbackHandler, Producer, ProducerBatch, ProducerData, ProduceResult
from pipeline.protocol.errors import KafkaProtocolError

from .history import History

log = logging.getLogger(__name__)

# librdkafka's own log (a broker going away is expected here) goes to Python logging instead of stderr.
librdkafka_logger = logging.getLogger("jepsen.librdkafka")

# Long enough that a message waits through a leader's failover instead of failing.
DELIVERY_TIMEOUT_MS = 120_000


class Writer(Protocol):
    """Sends values to partitions and records them in a History."""

    name: str

    def send(self, partition: int, value: str) -> None: ...

    def flush(self, timeout_s: float) -> int: ...

    def close(self) -> None: ...


class ConfluentWriter:
    """confluent-kafka's Producer, enable.idempotence=true and acks=all; ``send`` never blocks for long."""

    def __init__(self, history: History, bootstrap: str, topic: str, name: str,
                 config: dict[str, Any] | None = None) -> None:
        self.history = history
        self.topic = topic
        self.name = name
        self._producer = ConfluentProducer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "message.timeout.ms": DELIVERY_TIMEOUT_MS, "linger.ms": 5, "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 250, "topic.metadata.refresh.fast.interval.ms": 50,
            # librdkafka's default backs off up to 10 s from a broker that refused connections.
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 250,
            "client.id": name, "logger": librdkafka_logger, **(config or {})})

    def send(self, partition: int, value: str, on_ack: Callable[[], None] | None = None) -> None:
        self.history.send(self.name, partition, value)

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                self.history.ack(value, message.offset())
                if on_ack is not None:
                    on_ack()
            else:
                self.history.fail(value, str(error))
        while True:
            try:
                self._producer.produce(self.topic, value.encode(), partition=partition, on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Wait for every answer; return how many messages are still unanswered."""
        return self._producer.flush(timeout_s)

    def close(self) -> None:
        """Give up on what is still unanswered (recorded as failed), so that nothing waits for it."""
        self._producer.purge()
        self._producer.flush(0)


class _Recorder(CallbackHandler):
    def __init__(self, history: History) -> None:
        self.history = history

    def after_send(self, batch: ProducerBatch, result: ProduceResult | BaseException) -> None:
        for index, message in enumerate(batch.messages):
            value = message.decode()
            if isinstance(result, BaseException):
                self.history.fail(value, str(result))
            else:
                self.history.ack(value, result.base_offset + index if result.base_offset >= 0 else None)


class PipelineWriter:
    """The project's async Producer with enable.idempotence=true (so acks=all); each acknowledgement carries
    its own batch's offset, however many batches of a partition one drain sends."""

    def __init__(self, history: History, bootstrap: str, topic: str, name: str,
                 config: dict[str, Any] | None = None) -> None:
        self.history = history
        self.topic = topic
        self.name = name
        self._producer = Producer({
            "metadata.broker.list": bootstrap, "producer.type": "async", "enable.idempotence": True,
            "batch.size": 200, "queue.time": 5,
            "message.send.max.retries": 1000, "retry.backoff.ms": 100, "request.timeout.ms": 10000,
            "client.id": name, **(config or {})}, callback_handler=_Recorder(history))

    def send(self, partition: int, value: str) -> None:
        self.history.send(self.name, partition, value)
        self._producer.send(ProducerData(self.topic, None, [value.encode()], partition=partition))

    def flush(self, timeout_s: float) -> int:
        return 0 if self._producer.flush(timeout_s) else 1

    def close(self) -> None:
        self._producer.close(30)


# The writers a run can use, by the name the bounce script takes.
WRITERS: dict[str, Callable[..., Writer]] = {"confluent": ConfluentWriter, "pipeline": PipelineWriter}


def consumer_config(bootstrap: str, name: str, **extra: object) -> dict[str, object]:
    return {"metadata.broker.list": bootstrap, "client.id": name, "auto.offset.reset": "smallest",
            "refresh.leader.backoff.ms": 100, "fetch.wait.max.ms": 100, **extra}


class Reader:
    """Follows partitions from their start on a thread with the project's Consumer, recording every read.

    A consumer that fails is replaced by a new one starting where the old one stopped. The consumer is
    used (and closed) on the reader's thread only; its iteration pauses every IDLE_MS without messages to
    look whether the reader was stopped.
    """

    IDLE_MS = 200

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int, name: str = "reader",
                 config: dict[str, object] | None = None) -> None:
        self.history = history
        self.config = config or {}
        self.bootstrap = bootstrap
        self.topic = topic
        self.name = name
        self.positions: dict[int, int | str] = {p: "earliest" for p in range(partitions)}
        self.errors: list[str] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"jepsen-{name}", daemon=True)

    def start(self) -> Reader:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.is_set():
            consumer = Consumer(consumer_config(self.bootstrap, self.name, **{"consumer.timeout.ms": self.IDLE_MS},
                                                **self.config),
                                partitions={(self.topic, p): start for p, start in self.positions.items()})
            try:
                for record in consumer:
                    self.history.read(self.name, record.partition, record.offset, record.value.decode())
                    self.positions[record.partition] = record.offset + 1
                    if self._stopped.is_set():
                        break
            except (KafkaClientError, KafkaProtocolError, OSError) as error:
                self.errors.append(repr(error))
                log.info("reader %s: %r; starting a new consumer", self.name, error)
                self._stopped.wait(0.2)
            finally:
                consumer.close()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(30)
        if self._thread.is_alive():
            raise RuntimeError(f"reader {self.name} did not stop")


def read_final(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0
               ) -> dict[int, list[tuple[int, str]]]:
    """Every partition's whole log, from offset 0 to the latest offset ListOffsets gives."""
    with AdminClient(bootstrap) as admin:
        ends = admin.list_offsets(topic, range(partitions))
    logs: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    wanted = {p for p, end in ends.items() if end}
    if not wanted:
        return logs
    consumer = Consumer(consumer_config(bootstrap, "final-read", **{"consumer.timeout.ms": 5000}),
                        partitions={(topic, p): "earliest" for p in wanted})
    deadline = time.monotonic() + timeout_s
    try:
        for record in consumer:
            if record.offset < (ends[record.partition] or 0):
                logs[record.partition].append((record.offset, record.value.decode()))
            if record.offset + 1 >= (ends[record.partition] or 0):
                wanted.discard(record.partition)
            if not wanted or time.monotonic() > deadline:
                break
    finally:
        consumer.close()
    if wanted:
        raise TimeoutError(f"final read of {topic}: partitions {sorted(wanted)} not read to their end {ends}")
    return logs
