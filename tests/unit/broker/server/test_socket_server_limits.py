"""SocketServer limits over real loopback sockets: buffers follow received bytes, request bytes in flight are
capped without deadlock, connections take turns, idle and surplus connections are closed.

The server runs on its own event loop in a thread, so the test drives blocking client sockets and can
block a handler while it arranges what the server sees next.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Any, Callable, Iterator

import pytest

from broker.server.connection_quotas import ConnectionQuotas, parse_overrides
from broker.server.memory_pool import RequestMemoryPool
from broker.server.receive_buffer import INITIAL_SIZE, READ_SIZE
from broker.server.socket_server import SocketServer
from pipeline.config import ConfigError
from tests.support.polling import wait_until

MiB = 1024 * 1024


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    (length,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, length)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def echo(payload: memoryview, peer: str) -> list[bytes]:
    return [frame(b"echo " + bytes(payload[:16]) + struct.pack(">i", len(payload)))]


def echoed(payload: bytes) -> bytes:
    return b"echo " + payload[:16] + struct.pack(">i", len(payload))


class ServerThread:
    """A SocketServer on an event loop of its own thread; ``call`` runs a function on that loop."""

    def __init__(self, handler: Callable[[memoryview, str], Any], max_request_bytes: int = 100 * MiB,
                 **limits: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = SocketServer("127.0.0.1", 0, handler, max_request_bytes, **limits)
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        self.port = self.server.bound_port
        self.clients: list[socket.socket] = []

    def call(self, function: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return function()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def connect(self, source: str = "127.0.0.1") -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10, source_address=(source, 0))
        self.clients.append(sock)
        return sock

    def connection_states(self) -> list[Any]:
        return self.call(lambda: list(self.server.connections.values()))

    def close(self) -> None:
        for sock in self.clients:
            sock.close()

        async def stop() -> None:
            await self.server.stop_accepting()
            await self.server.close_all()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def servers() -> Iterator[Callable[..., ServerThread]]:
    started: list[ServerThread] = []

    def make(handler: Callable[[memoryview, str], Any] = echo, **kwargs: Any) -> ServerThread:
        server = ServerThread(handler, **kwargs)
        started.append(server)
        return server

    yield make
    for server in started:
        server.close()


def only_connection(server: ServerThread) -> Any:
    return wait_until(lambda: (lambda states: states[0] if len(states) == 1 else None)(server.connection_states()),
                      message="one accepted connection")


def test_an_announced_frame_costs_only_the_bytes_that_arrived(servers):
    server = servers()
    client = server.connect()
    client.sendall(struct.pack(">i", 100 * MiB) + b"x" * 1000)
    connection = only_connection(server)
    wait_until(lambda: server.call(lambda: connection.charged) == 1004, message="the 1004 bytes read")
    assert server.call(lambda: connection.buffer.capacity) <= 64 * 1024


def test_buffer_grows_for_a_large_request_and_shrinks_after_it(servers):
    server = servers()
    client = server.connect()
    big = bytes(range(256)) * (12 * MiB // 256)
    client.sendall(frame(big))
    assert read_frame(client) == echoed(big)
    connection = only_connection(server)
    assert server.call(lambda: connection.buffer.capacity) >= len(big)

    def small_request_answered_and_buffer_shrunk() -> bool:
        client.sendall(frame(b"small"))
        assert read_frame(client) == echoed(b"small")
        return server.call(lambda: connection.buffer.capacity) <= READ_SIZE
    wait_until(small_request_answered_and_buffer_shrunk, interval=0,
               message=lambda: f"the buffer back to {READ_SIZE} bytes (has {connection.buffer.capacity})")


def test_a_quiet_connection_gives_its_buffer_back(servers):
    server = servers(connections_max_idle_ms=4000)
    client = server.connect()
    big = b"b" * (2 * MiB)
    client.sendall(frame(big))
    assert read_frame(client) == echoed(big)
    connection = only_connection(server)
    wait_until(lambda: server.call(lambda: connection.buffer.capacity) <= INITIAL_SIZE, timeout=3,
               message="the quiet connection's buffer back to its initial size")
    client.sendall(frame(b"after"))
    assert read_frame(client) == echoed(b"after")


def test_requests_larger_than_the_cap_and_interleaved_partial_requests_are_all_served(servers):
    cap = 64 * 1024
    server = servers(queued_max_request_bytes=cap)
    pool = server.server.memory_pool
    peak = [0]
    charge = pool.charge

    def tracking_charge(size: int) -> None:
        charge(size)
        peak[0] = max(peak[0], pool.used)
    pool.charge = tracking_charge
    requests = [bytes([index]) * (300 * 1024 + index) for index in range(4)]
    clients = [server.connect() for _ in requests]
    # Every client sends part of its request before any finishes: each part alone fits under the cap,
    # together they fill it, and no request can complete without reading past it.
    for client, request in zip(clients, requests):
        client.sendall(frame(request)[: 40 * 1024])
    wait_until(lambda: server.call(lambda: pool.used) >= cap, message="the pool filled by partial requests")
    senders = [threading.Thread(target=client.sendall, args=(frame(request)[40 * 1024 :],))
               for client, request in zip(clients, requests)]
    for sender in senders:
        sender.start()
    answers = [read_frame(client) for client in clients]
    for sender in senders:
        sender.join(10)
    assert answers == [echoed(request) for request in requests]
    # Within the cap plus the one request allowed past it (and one read of slack).
    assert peak[0] <= cap + max(len(r) + 4 for r in requests) + READ_SIZE
    assert server.call(lambda: pool.used) == 0


def test_connections_stop_reading_while_the_cap_is_taken(servers):
    cap = 64 * 1024
    server = servers(queued_max_request_bytes=cap)
    pool = server.server.memory_pool
    large = b"L" * MiB
    holder = server.connect()
    holder.sendall(frame(large)[: 200 * 1024])
    wait_until(lambda: server.call(lambda: pool.used) == 200 * 1024, message="200 KiB of the large request read")
    other = server.connect()
    other.sendall(frame(b"small"))
    wait_until(lambda: server.call(lambda: pool.waiting) == 1, message="the second connection waiting for memory")
    assert server.call(lambda: pool.used) == 200 * 1024
    holder.sendall(frame(large)[200 * 1024 :])
    assert read_frame(holder) == echoed(large)
    assert read_frame(other) == echoed(b"small")


def test_a_pipelining_connection_does_not_starve_another(servers):
    flood_started = threading.Event()
    other_sent = threading.Event()
    order: list[bytes] = []

    def handler(payload: memoryview, peer: str) -> list[bytes] | None:
        body = bytes(payload)
        order.append(body)
        if body == b"flood-first":
            flood_started.set()
            # Hold the server until the other connection's request is on its way, so that it is waiting
            # while most of the flood is still unhandled.
            other_sent.wait(10)
        return [frame(b"answer")] if body == b"other" else None

    server = servers(handler)
    other = server.connect()
    flooder = server.connect()
    flood_count = 20000
    flooder.sendall(frame(b"flood-first") + frame(b"flood") * flood_count)
    assert flood_started.wait(10)
    other.sendall(frame(b"other"))
    other_sent.set()
    assert read_frame(other) == b"answer"
    position = order.index(b"other")
    # Served within a few turns of the flooder, long before its backlog is drained.
    assert position < flood_count // 20, f"the other connection was served after {position} flood frames"


def test_silent_connection_is_closed_after_the_idle_timeout(servers):
    server = servers(connections_max_idle_ms=1000)
    silent = server.connect()
    active = server.connect()
    wait_until(lambda: len(server.connection_states()) == 2, message="two connections")

    def active_answers_and_silent_closed() -> bool:
        active.sendall(frame(b"ping"))
        assert read_frame(active) == echoed(b"ping")
        return len(server.connection_states()) == 1
    wait_until(active_answers_and_silent_closed, timeout=10, message="the silent connection closed")
    assert silent.recv(1) == b""
    active.sendall(frame(b"still"))
    assert read_frame(active) == echoed(b"still")


def test_connections_over_max_connections_are_closed_at_once(servers):
    server = servers(max_connections=2)
    first, second = server.connect(), server.connect()
    wait_until(lambda: len(server.connection_states()) == 2, message="two connections")
    third = server.connect()
    assert third.recv(1) == b""
    for client in (first, second):
        client.sendall(frame(b"ok"))
        assert read_frame(client) == echoed(b"ok")
    first.close()
    wait_until(lambda: len(server.connection_states()) == 1, message="the first connection gone")
    fourth = server.connect()
    fourth.sendall(frame(b"room again"))
    assert read_frame(fourth) == echoed(b"room again")


def test_connections_over_the_per_ip_limit_are_closed_and_overrides_apply(servers):
    server = servers(max_connections_per_ip=1, max_connections_per_ip_overrides={"127.0.0.2": 2})
    local = server.connect("127.0.0.1")
    assert server.connect("127.0.0.1").recv(1) == b""
    overridden = [server.connect("127.0.0.2"), server.connect("127.0.0.2")]
    assert server.connect("127.0.0.2").recv(1) == b""
    for client in [local, *overridden]:
        client.sendall(frame(b"hi"))
        assert read_frame(client) == echoed(b"hi")


def test_only_a_connection_inside_a_request_may_read_past_a_full_pool():
    pool = RequestMemoryPool(100)
    between, first, second = object(), object(), object()
    pool.charge(100)
    assert pool.readable(between, partial=False) == 0
    assert pool.readable(first, partial=True) > 100
    assert pool.readable(second, partial=True) == 0
    assert pool.readable(between, partial=False) == 0
    pool.release(60, first)
    assert pool.readable(second, partial=True) == 60
    pool.charge(60)
    assert pool.readable(second, partial=True) > 100
    assert pool.readable(first, partial=True) == 0


def test_connection_quotas_count_and_release():
    quotas = ConnectionQuotas(3, 2, {"10.0.0.9": 0})
    assert quotas.try_open("10.0.0.1") is None
    assert quotas.try_open("10.0.0.1") is None
    assert "10.0.0.1 already has the configured maximum of 2" in quotas.try_open("10.0.0.1")
    assert quotas.try_open("10.0.0.9") is not None
    assert quotas.try_open("10.0.0.2") is None
    assert "maximum of 3 connections" in quotas.try_open("10.0.0.3")
    quotas.close("10.0.0.1")
    assert quotas.try_open("10.0.0.3") is None
    assert quotas.total == 3


def test_per_ip_overrides_parse_addresses_and_host_names():
    assert parse_overrides("") == {}
    assert parse_overrides("127.0.0.2:5, localhost:7") == {"127.0.0.2": 5, "127.0.0.1": 7}
    for bad in ("127.0.0.1", "127.0.0.1:x", ":5"):
        with pytest.raises(ConfigError):
            parse_overrides(bad)
