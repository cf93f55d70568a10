"""Our broker and clients: ``python -m broker`` (tests.support.BrokerProcess) driven by pipeline.client.

Produce (the paper's Figure 4): one ``Producer`` per case on a fresh one-partition topic, B messages per
``send()`` of ``ProducerData`` (B = the batch size). With acks=0 the producer is the paper's sync producer:
each send() is one Produce request that nothing answers. With acks=1 the producer runs async (``batch.size``
B, ``queue.time`` 5 ms): a background sender awaits each request's acknowledgement, the caller does not.
The clock stops when ListOffsets says the broker holds every message.

Consume (Figure 5): ``SimpleConsumer.fetch`` from offset 0 with a 200 KB fetch size (about 1,000 messages
of 200 bytes per pull), decoding every message. Broker-only figures: pre-encoded batches sent in
pipelined Produce requests (no client encoding), and whole-log fetches without record decoding, with
``socket.sendfile.enable`` true and then false (the same log, broker restarted).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bench.harness.common import (
    BenchError,
    BrokerMonitor,
    Course,
    latency_result,
    paced,
    stamp_of,
    stamped,
    wait_until,
)
from pipeline.client import FetchRequest, Producer, ProducerData, SimpleConsumer
from pipeline.records import encode_batch
from tests.support import BrokerProcess
from tests.support.clients import create_topic
from tests.support.load import produce_bulk

FETCH_BYTES = 200 * 1000
BROKER_ONLY_FETCH_BYTES = 1024 * 1024


class Ours:
    """One standalone broker of ours on a free loopback port, its log dir under the work dir."""

    name = "ours"
    produce_cases = tuple({"batch": batch, "acks": acks} for acks in (0, 1) for batch in (1, 50, 200, 1000))
    # The consumer test reads the topic written in batches of 50 with acks=0 (the paper's producer setting).
    consume_case = {"batch": 50, "acks": 0}

    def __init__(self) -> None:
        self.broker: BrokerProcess | None = None
        self.data_dir = Path()
        self.workdir = Path()

    @staticmethod
    def missing() -> str | None:
        return None

    @property
    def pid(self) -> int:
        assert self.broker is not None
        return self.broker.pid

    def start(self, workdir: Path, overrides: dict[str, object] | None = None) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "ours-logs"
        port = self.broker.port if self.broker is not None else None
        self.broker = BrokerProcess(self.data_dir, port=port, overrides=overrides or {},
                                    log_path=workdir / "ours-broker.log", start_timeout=60)
        self.broker.start()

    def stop(self) -> None:
        if self.broker is not None and self.broker.is_running:
            self.broker.stop()

    def _log_end_offset(self, consumer: SimpleConsumer, topic: str) -> int:
        return consumer.get_offsets_before(topic, 0, -1, 1)[0]

    def _wait_stored(self, topic: str, messages: int) -> None:
        assert self.broker is not None
        with SimpleConsumer(self.broker.host, self.broker.port) as consumer:
            wait_until(lambda: self._log_end_offset(consumer, topic) >= messages, 600,
                       f"our broker to hold {messages} messages of {topic}", interval=0.002)

    def produce(self, queue: str, messages: int, body: bytes, course: Course, batch: int, acks: int) -> None:
        assert self.broker is not None
        create_topic(self.broker.bootstrap, queue, 1)
        config: dict[str, object] = {"metadata.broker.list": self.broker.bootstrap, "request.required.acks": acks}
        if acks:
            config.update({"producer.type": "async", "batch.size": batch, "queue.time": 5,
                           "queue.buffering.max.messages": max(10_000, 20 * batch)})
        data = ProducerData(queue, None, [body] * batch)
        sends = messages // batch
        with Producer(config) as producer:
            send = producer.send
            course.begin()
            every = max(1, 256 // batch)
            for i in range(1, sends + 1):
                send(data)
                if i % every == 0:
                    course.mark(i * batch)
            rest = messages - sends * batch
            if rest:
                send(ProducerData(queue, None, [body] * rest))
        self._wait_stored(queue, messages)
        course.end(messages)

    def consume(self, queue: str, messages: int) -> int:
        assert self.broker is not None
        received = value_bytes = offset = 0
        with SimpleConsumer(self.broker.host, self.broker.port, buffer_size=FETCH_BYTES) as consumer:
            while received < messages:
                message_set = consumer.fetch(FetchRequest(queue, 0, offset))
                for message in message_set:
                    value_bytes += len(message.value)
                    received += 1
                if message_set.next_offset == offset:
                    raise BenchError(f"no progress at offset {offset} of {queue} ({received} of {messages} read)")
                offset = message_set.next_offset
        return value_bytes

    def latency(self, queue: str, body: bytes, rate: int, count: int) -> list[int]:
        assert self.broker is not None
        broker = self.broker
        create_topic(broker.bootstrap, queue, 1)
        latencies: list[int] = []
        errors: list[BaseException] = []

        def consume() -> None:
            try:
                offset = 0
                deadline = time.monotonic() + 120
                with SimpleConsumer(broker.host, broker.port, buffer_size=FETCH_BYTES) as consumer:
                    while len(latencies) < count and time.monotonic() < deadline:
                        message_set = consumer.fetch(FetchRequest(queue, 0, offset), max_wait_ms=100, min_bytes=1)
                        now = time.monotonic_ns()
                        for message in message_set:
                            latencies.append(now - stamp_of(message.value))
                        offset = message_set.next_offset
            except BaseException as exc:  # handed to the main thread
                errors.append(exc)

        thread = threading.Thread(target=consume, name="ours-latency-consumer")
        thread.start()
        try:
            with Producer({"metadata.broker.list": broker.bootstrap, "request.required.acks": 1}) as producer:
                for _ in paced(count, rate):
                    producer.send(ProducerData(queue, None, [stamped(body)]))
        finally:
            thread.join()
        return latency_result(latencies, count, errors)

    def broker_only_produce(self, queue: str, messages: int, body: bytes, batch: int) -> dict[str, float]:
        """Pre-encoded batches of ``batch`` messages in pipelined acks=1 Produce requests: no client encoding."""
        assert self.broker is not None
        create_topic(self.broker.bootstrap, queue, 1)
        encoded = encode_batch([body] * batch)
        requests = max(1, messages // batch)
        with BrokerMonitor(self.pid) as monitor:
            started = time.perf_counter()
            produce_bulk(self.broker.host, self.broker.port, queue, encoded, len(encoded) * requests, in_flight=8)
            elapsed = time.perf_counter() - started
        stored = requests * batch
        return {"test": "broker-produce", "batch": batch, "messages": stored, "seconds": round(elapsed, 3),
                "msgs_per_s": round(stored / elapsed, 1), "mb_per_s": round(stored * len(body) / elapsed / 1e6, 2),
                **monitor.figures(stored)}

    def broker_only_fetch(self, queue: str, messages: int, rounds: int) -> dict[str, dict[str, float]]:
        """Whole-log fetches (1 MiB each, batches CRC-checked, records not decoded), sendfile on and off."""
        figures = {}
        for sendfile in (True, False):
            self.stop()
            self.start(self.workdir, {"socket.sendfile.enable": str(sendfile).lower()})
            with BrokerMonitor(self.pid) as monitor:
                started = time.perf_counter()
                fetched_bytes = 0
                with SimpleConsumer(self.broker.host, self.broker.port, buffer_size=BROKER_ONLY_FETCH_BYTES) as consumer:
                    for _ in range(rounds):
                        offset = 0
                        while offset < messages:
                            message_set = consumer.fetch(FetchRequest(queue, 0, offset))
                            fetched_bytes += len(message_set.data)
                            offset = message_set.next_offset
                elapsed = time.perf_counter() - started
            total = messages * rounds
            figures["sendfile" if sendfile else "read_and_send"] = {
                "messages": total, "seconds": round(elapsed, 3), "msgs_per_s": round(total / elapsed, 1),
                "mb_per_s": round(fetched_bytes / elapsed / 1e6, 1), **monitor.figures(total)}
        self.stop()
        self.start(self.workdir)
        return figures
