"""NATS JetStream adapter: nats-server with JetStream on a file store, driven by nats-py.

Produce: ``publish_async`` on a file-backed stream, at most ``PENDING_ACKS`` unacknowledged publishes in
flight (4,000 was fastest here; the caller never waits for one message's ack), then wait until all are
acknowledged -- i.e. stored. Consume: one pull consumer with ack policy none (auto-acknowledge),
fetching about ``FETCH_MESSAGES`` messages per pull. Latency: a push subscription on an ordered consumer
while messages are published at a fixed rate.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any, Coroutine, TypeVar

from bench.harness.common import (
    BenchError,
    ChildProcess,
    ServerAdapter,
    Course,
    free_port,
    port_open,
    stamp_of,
    stamped,
)

T = TypeVar("T")
PENDING_ACKS = 4000
FETCH_MESSAGES = 1000


class NatsJetStream(ServerAdapter):
    """One nats-server -js process on a loopback port with its store under ``workdir``."""

    name = "nats-jetstream"
    produce_cases = ({"batch": 1, "acks": 1},)

    @staticmethod
    def missing() -> str | None:
        return None if shutil.which("nats-server") else "nats-server is not installed (Debian package nats-server)"

    def start(self, workdir: Path) -> None:
        self.port = free_port()
        self.data_dir = workdir / "nats-store"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = ["nats-server", "-js", "-sd", str(self.data_dir), "-a", "127.0.0.1", "-p", str(self.port),
                   "-m", "0", "-n", "bench"]
        self.server = ChildProcess("nats-server", command, workdir / "nats-server.log")
        self.server.start(lambda: port_open(self.port), timeout=30)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(coroutine)

    async def _connect(self) -> Any:
        import nats

        return await nats.connect(f"nats://127.0.0.1:{self.port}", max_reconnect_attempts=0)

    async def _stream(self, js: Any, name: str) -> None:
        from nats.js.api import StorageType, StreamConfig

        await js.add_stream(StreamConfig(name=name, subjects=[name], storage=StorageType.FILE))

    def produce(self, queue: str, messages: int, body: bytes, course: Course, batch: int, acks: int) -> None:
        self._run(self._produce(queue, messages, body, course))

    async def _produce(self, queue: str, messages: int, body: bytes, course: Course) -> None:
        nc = await self._connect()
        try:
            js = nc.jetstream(publish_async_max_pending=PENDING_ACKS)
            await self._stream(js, queue)
            course.begin()
            publish = js.publish_async
            mark = course.mark
            for sent in range(1, messages + 1):
                await publish(queue, body)
                if sent & 255 == 0:
                    mark(sent)
            await js.publish_async_completed()
            course.end(messages)
            info = await js.stream_info(queue)
            if info.state.messages != messages:
                raise BenchError(f"stream {queue} holds {info.state.messages} of {messages} messages")
        finally:
            await nc.close()

    def consume(self, queue: str, messages: int) -> int:
        return self._run(self._consume(queue, messages))

    async def _consume(self, queue: str, messages: int) -> int:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        nc = await self._connect()
        try:
            js = nc.jetstream()
            config = ConsumerConfig(durable_name="bench", ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
            subscription = await js.pull_subscribe(queue, durable="bench", config=config)
            received = value_bytes = 0
            deadline = time.monotonic() + 600
            while received < messages:
                try:
                    batch = await subscription.fetch(FETCH_MESSAGES, timeout=5)
                except NatsTimeout:
                    if time.monotonic() > deadline:
                        raise BenchError(f"consumed {received} of {messages} messages") from None
                    continue
                for message in batch:
                    value_bytes += len(message.data)
                received += len(batch)
            return value_bytes
        finally:
            await nc.close()

    def latency(self, queue: str, body: bytes, rate: int, count: int) -> list[int]:
        return self._run(self._latency(queue, body, rate, count))

    async def _latency(self, queue: str, body: bytes, rate: int, count: int) -> list[int]:
        producer_nc = await self._connect()
        consumer_nc = await self._connect()
        try:
            js = producer_nc.jetstream(publish_async_max_pending=PENDING_ACKS)
            await self._stream(js, queue)
            latencies: list[int] = []
            done = asyncio.get_running_loop().create_future()

            async def on_message(message: Any) -> None:
                latencies.append(time.monotonic_ns() - stamp_of(message.data))
                if len(latencies) >= count and not done.done():
                    done.set_result(None)

            await consumer_nc.jetstream().subscribe(queue, cb=on_message, ordered_consumer=True)
            interval = 1.0 / rate
            start = time.perf_counter()
            for i in range(count):
                delay = start + i * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await js.publish_async(queue, stamped(body))
            await js.publish_async_completed()
            await asyncio.wait_for(done, 60)
            return latencies
        finally:
            await consumer_nc.close()
            await producer_nc.close()
