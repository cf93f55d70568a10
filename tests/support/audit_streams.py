"""A scripted stream for the audit's readers: the records given, then nothing, as a caught-up KafkaStream."""

from __future__ import annotations

from typing import Iterator

from pipeline.client.consumer import ConsumerRecord
from pipeline.client.consumer_stream import ConsumerTimeout


class ScriptedConnector:
    """A connector handing out ``records`` once, then nothing (as a caught-up stream does)."""

    def __init__(self, records: list[ConsumerRecord], passed: dict | None = None, batch: int = 3) -> None:
        self.records = records
        #: Records handed out by ``next_batch`` at most.
        self.batch = batch
        self.committed: list[dict] = []
        self.shut = False
        #: Passed once the records ran out (read_committed: markers after the last of them).
        self.passed = passed or {}
        self.ran_out = False

    def create_message_streams_by_filter(self, topics, n):
        return [self]

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        if self.shut:
            raise StopIteration
        if self.records:
            return self.records.pop(0)
        self.ran_out = True
        raise ConsumerTimeout("nothing new")

    def next_batch(self) -> list[ConsumerRecord]:
        first = next(self)
        more, self.records = self.records[:self.batch - 1], self.records[self.batch - 1:]
        return [first, *more]

    def take_passed(self) -> dict:
        # As a KafkaStream: known once the next record was asked for after the last one.
        if not self.ran_out:
            return {}
        passed, self.passed = self.passed, {}
        return passed

    def commit_offsets(self, offsets):
        self.committed.append(dict(offsets))
        return dict(offsets)

    def shutdown(self) -> None:
        self.shut = True
