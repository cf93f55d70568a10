"""A broker run inside the test process, on its own event-loop thread.

For tests that must intercept what the broker does below Python (e.g. wrap ``os.fsync`` to slow it
down or count it), which a broker child process would not let them do. Everything else should use
BrokerProcess.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Mapping

from broker.config import KafkaConfig
from broker.kafka_server import KafkaServer


class InProcessBroker:
    """A standalone KafkaServer on a loop thread of this process; a context manager that stops it."""

    def __init__(self, log_dir: Path, overrides: Mapping[str, object] | None = None) -> None:
        values = {"log.dirs": str(log_dir), "port": "0", "host.name": "127.0.0.1"}
        values.update({key: str(value) for key, value in (overrides or {}).items()})
        self.config = KafkaConfig(values)
        self.server = KafkaServer(self.config)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="in-process-broker", daemon=True)

    @property
    def port(self) -> int:
        return self.server.port

    def start(self, timeout: float = 30.0) -> InProcessBroker:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.startup(), self.loop).result(timeout)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
            self.loop.close()

    def __enter__(self) -> InProcessBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
