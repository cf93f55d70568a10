"""RabbitMQ adapter: our own rabbitmq-server node (and its epmd) on loopback ports, driven by pika.

The node runs from Debian's /usr/lib/rabbitmq/bin/rabbitmq-server with every path (Mnesia, logs, the
Erlang cookie's HOME) under the work dir and no plugins. We start epmd ourselves on a free port first, so
both processes are ours to stop by pid. Produce: a durable queue, persistent messages (delivery_mode 2),
no publisher confirms; the clock stops when the queue holds every message (RabbitMQ writes persistent
messages to disk asynchronously). Consume: auto-ack ``basic_consume`` (RabbitMQ ignores prefetch for
auto-ack consumers: it pushes as fast as the socket takes them).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness.common import (
    BenchError,
    ChildProcess,
    Course,
    free_port,
    latency_result,
    paced,
    port_open,
    ServerAdapter,
    stamp_of,
    stamped,
    wait_until,
)

SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


class RabbitMQ(ServerAdapter):
    """One RabbitMQ node plus the epmd it registers with."""

    name = "rabbitmq"
    produce_cases = ({"batch": 1, "acks": 0},)

    def __init__(self) -> None:
        super().__init__()
        self.epmd: ChildProcess | None = None

    @staticmethod
    def missing() -> str | None:
        if not SERVER_SCRIPT.exists() or not shutil.which("epmd"):
            return "rabbitmq-server is not installed (Debian package rabbitmq-server)"
        return None

    def start(self, workdir: Path) -> None:
        base = workdir / "rabbitmq"
        self.data_dir = base / "mnesia"
        home = base / "home"
        for directory in (self.data_dir, home, base / "log"):
            directory.mkdir(parents=True, exist_ok=True)
        (base / "enabled_plugins").write_text("[].\n")
        (base / "rabbitmq.conf").write_text("log.console = false\nlog.file.level = warning\n")
        epmd_port = free_port()
        self.epmd = ChildProcess("epmd", ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"], base / "epmd.log")
        self.epmd.start(lambda: port_open(epmd_port), timeout=15)
        self.port = free_port()
        env = dict(os.environ)
        env.update({
            "HOME": str(home),
            "ERL_EPMD_PORT": str(epmd_port),
            "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.data_dir),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
        })
        self.server = ChildProcess("rabbitmq-server", [str(SERVER_SCRIPT)], base / "server.log", env=env)
        try:
            self.server.start(self._accepts_amqp, timeout=90)
        except BaseException:
            self.epmd.stop()
            raise

    def _accepts_amqp(self) -> bool:
        import pika

        if not port_open(self.port):
            return False
        try:
            self._connect().close()
            return True
        except pika.exceptions.AMQPError:
            return False

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.server.stop(grace=60)
        finally:
            if self.epmd is not None:
                self.epmd.stop()

    def _connect(self) -> Any:
        import pika

        return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port, heartbeat=0,
                                                                 blocked_connection_timeout=600))

    def produce(self, queue: str, messages: int, body: bytes, course: Course, batch: int, acks: int) -> None:
        import pika

        connection = self._connect()
        try:
            channel = connection.channel()
            channel.queue_declare(queue, durable=True)
            properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
            publish = channel.basic_publish
            course.begin()
            for sent in range(1, messages + 1):
                publish("", queue, body, properties)
                if sent & 255 == 0:
                    course.mark(sent)
            wait_until(lambda: channel.queue_declare(queue, durable=True, passive=True).method.message_count
                       >= messages, 600, f"RabbitMQ to hold {messages} messages", interval=0.01)
            course.end(messages)
        finally:
            connection.close()

    def consume(self, queue: str, messages: int) -> int:
        connection = self._connect()
        try:
            channel = connection.channel()
            received = [0, 0]

            def on_message(_channel: Any, _method: Any, _properties: Any, body: bytes) -> None:
                received[0] += 1
                received[1] += len(body)

            channel.basic_consume(queue, on_message, auto_ack=True)
            deadline = time.monotonic() + 600
            while received[0] < messages:
                if time.monotonic() > deadline:
                    raise BenchError(f"consumed {received[0]} of {messages} messages")
                connection.process_data_events(time_limit=0.5)
            return received[1]
        finally:
            connection.close()

    def latency(self, queue: str, body: bytes, rate: int, count: int) -> list[int]:
        import pika

        latencies: list[int] = []
        errors: list[BaseException] = []
        consumer_ready = threading.Event()

        def consume() -> None:
            try:
                connection = self._connect()
                try:
                    channel = connection.channel()
                    channel.queue_declare(queue, durable=True)

                    def on_message(_channel: Any, _method: Any, _properties: Any, message: bytes) -> None:
                        latencies.append(time.monotonic_ns() - stamp_of(message))

                    channel.basic_consume(queue, on_message, auto_ack=True)
                    consumer_ready.set()
                    deadline = time.monotonic() + 120
                    while len(latencies) < count and time.monotonic() < deadline:
                        connection.process_data_events(time_limit=0.05)
                finally:
                    connection.close()
            except BaseException as exc:  # handed to the main thread
                errors.append(exc)
                consumer_ready.set()

        thread = threading.Thread(target=consume, name="rabbitmq-latency-consumer")
        thread.start()
        try:
            consumer_ready.wait(60)
            connection = self._connect()
            try:
                channel = connection.channel()
                properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
                for _ in paced(count, rate):
                    channel.basic_publish("", queue, stamped(body), properties)
            finally:
                connection.close()
        finally:
            thread.join()
        return latency_result(latencies, count, errors)
