"""PollingHandler.select answers as kazoo's selector_select does: the readable ones of the given objects, nothing
after the timeout, a closed one refused, a socket replaced under a reused descriptor number polled anew, and
writable waits left to kazoo."""

from __future__ import annotations

import os
import socket
import time

import pytest
from kazoo.handlers.utils import selector_select

from pipeline.zk.handler import PollingHandler


def test_readable_ones_are_named_in_order_and_a_timeout_names_none():
    handler = PollingHandler()
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        started = time.monotonic()
        assert handler.select([a, r], [], [], 0.05) == ([], [], []) == selector_select([a, r], [], [], 0.05)
        assert time.monotonic() - started >= 0.04
        os.write(w, b"x")
        assert handler.select([a, r], [], [], 1) == ([r], [], []) == selector_select([a, r], [], [], 1)
        b.send(b"y")
        assert handler.select([a, r], [], [], 1) == ([a, r], [], []) == selector_select([a, r], [], [], 1)
        b.close()  # hang-up reads as readable (the reader meets the end)
        os.read(r, 1)
        assert handler.select([a, r], [], [], 1)[0] == [a] == selector_select([a, r], [], [], 1)[0]
    finally:
        a.close()
        os.close(r)
        os.close(w)


def test_a_new_socket_under_a_reused_descriptor_and_a_closed_one():
    handler = PollingHandler()
    a, b = socket.socketpair()
    handler.select([a], [], [], 0)
    fd = a.fileno()
    a.close()
    b.close()
    with pytest.raises(Exception) as kazoos:
        selector_select([a], [], [], 0)
    with pytest.raises(kazoos.type):
        handler.select([a], [], [], 0)
    c, d = socket.socketpair()
    try:
        assert fd in (c.fileno(), d.fileno())
        reused, other = (c, d) if c.fileno() == fd else (d, c)
        other.send(b"z")
        assert handler.select([reused], [], [], 1) == ([reused], [], [])
    finally:
        c.close()
        d.close()


def test_writable_waits_and_bad_timeouts_are_kazoos():
    handler = PollingHandler()
    a, b = socket.socketpair()
    try:
        assert handler.select([], [a], [], 1) == ([], [a], [])
        with pytest.raises(ValueError):
            handler.select([a], [], [], -1)
    finally:
        a.close()
        b.close()
