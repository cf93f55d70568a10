"""The history of one run: every value sent (by whom, to which partition, in which order), which were
acknowledged (at which offset) or failed, every message a consumer read, and each partition's final log.

Values are unique strings; ``History`` is safe to record into from several threads.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Send:
    """One value a producer sent: ``index`` is its position in that producer's send order."""

    producer: str
    partition: int
    index: int
    value: str


@dataclass(frozen=True)
class Read:
    """One message a consumer read: the partition and offset it came from and its value."""

    consumer: str
    partition: int
    offset: int
    value: str


class History:
    """What happened in a run, recorded as it happens and then given each partition's final log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sends: dict[str, Send] = {}
        # value -> offset the acknowledgement gave (None when the client did not say)
        self.acks: dict[str, int | None] = {}
        self.failures: dict[str, str] = {}
        self.reads: list[Read] = []
        # partition -> [(offset, value)] in offset order
        self.final: dict[int, list[tuple[int, str]]] = {}
        self._next_index: dict[str, int] = {}

    def send(self, producer: str, partition: int, value: str) -> Send:
        """Record that ``producer`` is about to send ``value`` to ``partition`` (call before sending)."""
        with self._lock:
            if value in self.sends:
                raise ValueError(f"value {value!r} was sent before: values must be unique")
            index = self._next_index.get(producer, 0)
            self._next_index[producer] = index + 1
            sent = self.sends[value] = Send(producer, partition, index, value)
        return sent

    def ack(self, value: str, offset: int | None) -> None:
        """The send of ``value`` was acknowledged, at ``offset`` if the client said (None or < 0: unknown)."""
        with self._lock:
            self.acks[value] = offset if offset is not None and offset >= 0 else None

    def fail(self, value: str, reason: str) -> None:
        """The send of ``value`` failed (it may still have been stored: a failure is indeterminate)."""
        with self._lock:
            self.failures[value] = reason

    def read(self, consumer: str, partition: int, offset: int, value: str) -> None:
        with self._lock:
            self.reads.append(Read(consumer, partition, offset, value))

    def set_final(self, partition: int, log: list[tuple[int, str]]) -> None:
        """The partition's whole log as read from its start after the run: (offset, value) in offset order."""
        with self._lock:
            self.final[partition] = list(log)

    def dump(self, path: Path) -> None:
        """Write the history as one JSON document (for looking into a run afterwards)."""
        with self._lock:
            document = {
                "sends": [vars(s) for s in self.sends.values()],
                "acks": self.acks,
                "failures": self.failures,
                "reads": [vars(r) for r in self.reads],
                "final": {str(p): log for p, log in self.final.items()},
            }
        Path(path).write_text(json.dumps(document))
