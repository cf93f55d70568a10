"""Log lines name the exception's type: ZooKeeper's ConnectionLoss and asyncio's TimeoutError carry no message,
and ``exc or type(exc).__name__`` printed "controller event brokers failed (); retrying in 0.1s" (issue 26)."""

from __future__ import annotations

import asyncio
import logging

from kazoo.exceptions import ConnectionLoss

from broker.cluster.controller import KafkaController
from pipeline.error_text import describe_error


def test_an_exception_without_a_message_is_named_by_its_type():
    assert describe_error(ConnectionLoss()) == "ConnectionLoss"
    assert describe_error(asyncio.TimeoutError()) == "TimeoutError"
    assert describe_error(OSError(28, "No space left on device")) == "OSError: [Errno 28] No space left on device"


def test_the_controller_says_which_error_made_an_event_retry(caplog):
    controller = KafkaController.__new__(KafkaController)
    controller._failures = {}
    controller._retry_timers = {"brokers": None}  # a retry already scheduled: no timer thread
    with caplog.at_level(logging.WARNING, logger="broker.cluster.controller"):
        controller._retry("brokers", ConnectionLoss())
    assert caplog.messages == ["controller event brokers failed (ConnectionLoss); retrying in 0.1s"]
