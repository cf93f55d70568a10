"""ActiveMQ adapter: Debian's ActiveMQ 5 in our own JVM process, with a STOMP listener, driven by stomp.py.

Debian's activemq package ships no STOMP transport connector, so we write our own activemq.xml: one
``stomp://127.0.0.1:PORT`` connector, no OpenWire, no JMX, KahaDB under the work dir with the journal
synced periodically (asynchronous flushing, as in the paper's setup). Produce: persistent messages sent
without receipts (the producer does not wait per message); a receipt on one final frame of the same
connection tells when the broker has taken them all. Consume: ``ack=auto`` subscription with an
ActiveMQ prefetch of ``PREFETCH`` messages (its "messages per pull").
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bench.harness.common import (
    BenchError,
    ChildProcess,
    Course,
    free_port,
    paced,
    port_open,
    ServerAdapter,
    stamp_of,
    stamped,
)

ACTIVEMQ_HOME = Path("/usr/share/activemq")
PREFETCH = 1000
_CONFIG = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="bench" persistent="true"
          dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="periodic"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}"/>
    </transportConnectors>
  </broker>
</beans>
"""
_LOG_CONFIG = """rootLogger.level=WARN
rootLogger.appenderRef.console.ref=Console
appender.console.type=Console
appender.console.name=Console
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=%d %5p | %m%n
"""


class _Counter:
    """A stomp.py listener counting messages (and, for latency, their ages); it collects errors too."""

    def __init__(self, latencies: list[int] | None = None) -> None:
        self.count = 0
        self.value_bytes = 0
        self.latencies = latencies
        self.errors: list[str] = []
        self.receipts: set[str] = set()
        self.changed = threading.Condition()

    def on_message(self, frame: Any) -> None:
        body = frame.body if isinstance(frame.body, bytes) else frame.body.encode()
        if self.latencies is not None:
            self.latencies.append(time.monotonic_ns() - stamp_of(body))
        with self.changed:
            self.count += 1
            self.value_bytes += len(body)
            if self.count % 1000 == 0:
                self.changed.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.changed:
            self.receipts.add(frame.headers.get("receipt-id", ""))
            self.changed.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.changed:
            self.errors.append(str(frame.body))
            self.changed.notify_all()

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not condition():
                if self.errors:
                    raise BenchError(f"ActiveMQ error: {self.errors[0]}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BenchError(f"timed out waiting for {what}")
                self.changed.wait(min(remaining, 0.5))


class ActiveMQ(ServerAdapter):
    """One ActiveMQ broker JVM with a STOMP connector on a free loopback port."""

    name = "activemq"
    produce_cases = ({"batch": 1, "acks": 0},)

    @staticmethod
    def missing() -> str | None:
        if not (ACTIVEMQ_HOME / "bin" / "activemq.jar").exists() or not shutil.which("java"):
            return "activemq is not installed (Debian package activemq)"
        return None

    def start(self, workdir: Path) -> None:
        base = workdir / "activemq"
        self.data_dir = base / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        (base / "activemq.xml").write_text(_CONFIG.format(data=self.data_dir, port=self.port))
        (base / "log4j2.properties").write_text(_LOG_CONFIG)
        command = ["java", "-Xms512M", "-Xmx512M", "-Djava.awt.headless=true",
                   f"-Dactivemq.home={ACTIVEMQ_HOME}", f"-Dactivemq.base={base}", f"-Dactivemq.conf={base}",
                   f"-Dactivemq.data={self.data_dir}", f"-Dlog4j2.configurationFile={base / 'log4j2.properties'}",
                   "-jar", str(ACTIVEMQ_HOME / "bin" / "activemq.jar"), "start", f"xbean:file:{base / 'activemq.xml'}"]
        self.server = ChildProcess("activemq", command, base / "activemq.log", cwd=base)
        self.server.start(lambda: port_open(self.port), timeout=120)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=60)

    def _connect(self, listener: _Counter) -> Any:
        import stomp

        connection = stomp.Connection([("127.0.0.1", self.port)], auto_decode=False, heartbeats=(0, 0))
        connection.set_listener("bench", listener)
        connection.connect(wait=True)
        return connection

    def produce(self, queue: str, messages: int, body: bytes, course: Course, batch: int, acks: int) -> None:
        listener = _Counter()
        connection = self._connect(listener)
        destination = f"/queue/{queue}"
        headers = {"persistent": "true"}
        try:
            course.begin()
            send = connection.send
            for sent in range(1, messages):
                send(destination, body, headers=headers)
                if sent & 255 == 0:
                    course.mark(sent)
            send(destination, body, headers={"persistent": "true", "receipt": "last"})
            listener.wait_for(lambda: "last" in listener.receipts, 600, "the receipt of the last message")
            course.end(messages)
        finally:
            connection.disconnect()

    def consume(self, queue: str, messages: int) -> int:
        listener = _Counter()
        connection = self._connect(listener)
        try:
            connection.subscribe(f"/queue/{queue}", id="bench", ack="auto",
                                 headers={"activemq.prefetchSize": str(PREFETCH)})
            listener.wait_for(lambda: listener.count >= messages, 600, f"{messages} messages")
            return listener.value_bytes
        finally:
            connection.disconnect()

    def latency(self, queue: str, body: bytes, rate: int, count: int) -> list[int]:
        latencies: list[int] = []
        consumer_listener = _Counter(latencies)
        consumer = self._connect(consumer_listener)
        try:
            consumer.subscribe(f"/queue/{queue}", id="latency", ack="auto",
                               headers={"activemq.prefetchSize": str(PREFETCH)})
            producer = self._connect(_Counter())
            try:
                destination, headers = f"/queue/{queue}", {"persistent": "true"}
                for _ in paced(count, rate):
                    producer.send(destination, stamped(body), headers=headers)
            finally:
                producer.disconnect()
            consumer_listener.wait_for(lambda: consumer_listener.count >= count, 120, f"{count} messages")
            return latencies
        finally:
            consumer.disconnect()
