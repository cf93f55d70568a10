"""The test harness's port allocator: ports below the ephemeral range, a disjoint share per xdist worker, and
never the same port twice from one process, even while the first taker has not bound it yet."""

from __future__ import annotations

import socket

import pytest

from tests.support import ports
from tests.support.ports import consecutive_free_ports, free_port, port_range


def test_workers_take_from_disjoint_shares_below_the_ephemeral_range():
    shares = [set(port_range(f"gw{i}", "3")) for i in range(3)]
    assert not (shares[0] & shares[1] or shares[0] & shares[2] or shares[1] & shares[2])
    assert all(min(s) >= ports.LOW and max(s) < min(ports.HIGH, ports._ephemeral_start()) for s in shares)
    assert port_range("gw0", "1") == port_range("master", "not-a-number")


def test_a_port_handed_out_is_not_handed_out_again_before_it_is_bound():
    taken = [free_port() for _ in range(300)]
    assert len(set(taken)) == len(taken)
    share = port_range()
    assert all(port in share for port in taken)


def test_a_port_something_listens_on_is_skipped():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        allocator = ports._PortAllocator()
        allocator._next = busy
        share = range(busy, busy + 50)
        original = ports.port_range
        ports.port_range = lambda worker=None, workers=None: share
        try:
            assert allocator.take(1, "127.0.0.1") == busy + 1
        finally:
            ports.port_range = original


def test_consecutive_ports_are_all_bindable_and_not_given_twice():
    first = consecutive_free_ports(5)
    second = consecutive_free_ports(5)
    assert not set(range(first, first + 5)) & set(range(second, second + 5))
    sockets = [socket.socket() for _ in range(5)]
    try:
        for sock, port in zip(sockets, range(first, first + 5)):
            sock.bind(("127.0.0.1", port))
    finally:
        for sock in sockets:
            sock.close()


def test_more_consecutive_ports_than_the_share_holds_is_an_error():
    with pytest.raises(RuntimeError, match="do not fit"):
        consecutive_free_ports(len(port_range()) + 1)
