"""broker.log.cleaner_worker's side of a swap: what the worker makes of the broker's answers (no process)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.log.cleaner_worker import WorkerTarget
from broker.log.log_cleaner_manager import LogCleaningAbortedError


class ScriptedChannel:
    """A channel that answers with the messages it was given and keeps what was sent."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.sent: list[object] = []

    def send(self, message: object) -> None:
        self.sent.append(message)

    def receive(self) -> tuple[object, list[int]]:
        return self.answers.pop(0), []


class Cleaned:
    base_offset = 0
    closed = False

    def close(self) -> None:
        self.closed = True


def target(channel: ScriptedChannel) -> WorkerTarget:
    job = SimpleNamespace(dir=Path("/logs/compacted-0"), segments=[])
    return WorkerTarget(channel, job, [])  # type: ignore[arg-type]


def group() -> list:
    return [SimpleNamespace(base_offset=0), SimpleNamespace(base_offset=23)]


def test_a_swap_the_broker_makes_returns_true_and_closes_the_cleaned_segment():
    channel, cleaned = ScriptedChannel(("swapped", True)), Cleaned()
    assert target(channel).swap(cleaned, group()) is True  # type: ignore[arg-type]
    assert cleaned.closed and channel.sent == [("swap", 0, [0, 23])]


def test_a_swap_refused_because_the_log_moved_returns_false():
    assert target(ScriptedChannel(("swapped", False))).swap(Cleaned(), group()) is False  # type: ignore[arg-type]


def test_a_swap_refused_for_an_abort_says_the_pass_was_aborted():
    # The broker aborted (shutdown) while the swap request was on its way: it answers the abort, then refuses.
    channel = ScriptedChannel(("abort",), ("swapped", False))
    with pytest.raises(LogCleaningAbortedError, match="cleaning of compacted-0 was aborted"):
        target(channel).swap(Cleaned(), group())  # type: ignore[arg-type]


def test_a_swap_the_broker_made_before_it_aborted_still_counts():
    assert target(ScriptedChannel(("abort",), ("swapped", True))).swap(Cleaned(), group()) is True  # type: ignore[arg-type]


def test_an_unexpected_answer_is_an_error():
    with pytest.raises(RuntimeError, match="unexpected answer"):
        target(ScriptedChannel(("hello",))).swap(Cleaned(), group())  # type: ignore[arg-type]
