"""SocketServer with clients that go away, stall or crowd it out (issue 26), over real loopback sockets.

Requests read whole run exactly once even when the client resets before their answers; a client that leaves
while its request waits is noticed at once (its connection given back, a parked wait cancelled); a half-sent
frame holds its connection only socket.request.read.timeout.ms; at max.connections one address cannot keep
another out; warnings about a client are limited per address and kind.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time

from broker.server.socket_server import CloseConnection, Deferred, SocketServer
from tests.support.polling import wait_until_async


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a crashed client or a proxy does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def connect(port: int, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return sock


async def answer(sock: socket.socket, payload: bytes, timeout: float = 5.0) -> bytes:
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, frame(payload))
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), timeout)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data[4:]


def test_every_pipelined_request_read_whole_runs_once_when_the_client_resets_before_the_answers():
    """ApiVersions plus an OffsetCommit in one write, then a reset: the commit's coroutine was dropped when
    sending the first answer failed (18 of 20 commits lost)."""
    first_answered, committed = [], []

    def handler(payload: memoryview, peer: str):
        body = bytes(payload)
        if body.startswith(b"first"):
            time.sleep(0.05)  # the reset arrives before this answer is sent
            first_answered.append(body)
            return [frame(b"x" * 1000)]

        async def commit():
            await asyncio.sleep(0)
            committed.append(body)
            return [frame(b"committed")]
        return commit()

    async def scenario():
        server = SocketServer("127.0.0.1", 0, handler, 1 << 20)
        await server.start()
        try:
            for index in range(20):
                sock = await connect(server.bound_port)
                await asyncio.get_running_loop().sock_sendall(sock, frame(b"first%d" % index) + frame(b"commit%d" % index))
                reset(sock)
            await wait_until_async(lambda: len(first_answered) == 20 and server.connection_count == 0
                                   and not server.connections, message="every connection handled")
            await asyncio.sleep(0.1)
        finally:
            await server.stop_accepting()
            await server.close_all()
        return sorted(committed)

    assert run(scenario()) == sorted(b"commit%d" % i for i in range(20))


def test_a_parked_request_is_cancelled_and_its_connection_given_back_when_the_client_leaves():
    parked, cancelled = [], []

    def handler(payload: memoryview, peer: str):
        if bytes(payload) == b"join":
            async def wait_for_rebalance():
                parked.append(peer)
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancelled.append(peer)
                    raise
                return [frame(b"joined")]
            return Deferred(wait_for_rebalance(), parked=True)
        return [frame(b"pong")]

    async def scenario():
        # One connection per address: a new client is accepted only once the abandoned one was given back.
        server = SocketServer("127.0.0.1", 0, handler, 1 << 20, max_connections_per_ip=1)
        await server.start()
        try:
            for closing in (reset, socket.socket.close):
                sock = await connect(server.bound_port)
                await asyncio.get_running_loop().sock_sendall(sock, frame(b"join"))
                await wait_until_async(lambda: len(parked) == len(cancelled) + 1, message="the request parked")
                closing(sock)
                started = time.monotonic()
                await wait_until_async(lambda: server.connection_count == 0, timeout=1.0,
                                       message="the abandoned connection given back")
                assert time.monotonic() - started < 1.0
                await wait_until_async(lambda: len(cancelled) == len(parked), timeout=1.0,
                                       message="the parked request cancelled")
                fresh = await connect(server.bound_port)
                assert await answer(fresh, b"ping") == b"pong"
                fresh.close()
                await wait_until_async(lambda: server.connection_count == 0, message="the fresh connection closed")
        finally:
            await server.stop_accepting()
            await server.close_all()

    run(scenario())


def test_requests_that_are_not_parked_run_to_their_end_when_the_client_leaves():
    done = []

    def handler(payload: memoryview, peer: str):
        async def write_commit():
            await asyncio.sleep(2.0)
            done.append(bytes(payload))
            return [frame(b"written")]
        return write_commit()

    async def scenario():
        # The periodic scan (every 0.1 s with this read timeout) notices the client left.
        server = SocketServer("127.0.0.1", 0, handler, 1 << 20, request_read_timeout_ms=400)
        await server.start()
        try:
            sock = await connect(server.bound_port)
            await asyncio.get_running_loop().sock_sendall(sock, frame(b"commit") + frame(b"commit-2"))
            await asyncio.sleep(0.05)
            reset(sock)
            # Given back while the first request still runs; both run to their end.
            await wait_until_async(lambda: server.connection_count == 0, timeout=1.0,
                                   message="the connection given back")
            assert not done
            await wait_until_async(lambda: not server.connections, message="the requests done")
        finally:
            await server.stop_accepting()
            await server.close_all()

    run(scenario())
    assert done == [b"commit", b"commit-2"]


def test_a_half_sent_frame_holds_its_connection_only_the_read_timeout():
    async def scenario():
        server = SocketServer("127.0.0.1", 0, lambda payload, peer: [frame(b"ok")], 1 << 20,
                              connections_max_idle_ms=600_000, request_read_timeout_ms=400)
        await server.start()
        try:
            silent = [await connect(server.bound_port) for _ in range(20)]
            for sock in silent:
                await asyncio.get_running_loop().sock_sendall(sock, struct.pack(">i", 100))
            idle = await connect(server.bound_port)  # sent nothing: only connections.max.idle.ms applies
            await wait_until_async(lambda: server.connection_count == 21, message="all connected")
            started = time.monotonic()
            await wait_until_async(lambda: server.connection_count == 1, timeout=3.0,
                                   message="the half-sent frames' connections closed")
            assert time.monotonic() - started < 2.0
            assert server.client_errors == {"request_read_timeout": 20}
            assert await answer(idle, b"still here") == b"ok"
            for sock in silent + [idle]:
                sock.close()
        finally:
            await server.stop_accepting()
            await server.close_all()

    run(scenario())


def test_at_max_connections_one_address_cannot_keep_another_out():
    async def scenario():
        server = SocketServer("0.0.0.0", 0, lambda payload, peer: [frame(b"ok")], 1 << 20, max_connections=10)
        await server.start()
        try:
            crowd = [await connect(server.bound_port, "127.0.0.1") for _ in range(12)]
            await wait_until_async(lambda: server.quotas.count("127.0.0.1") == 10 and server.connections_closed == 0
                                   and server.client_errors.get("refused_connection") == 2,
                                   message="the crowd at the limit")
            other = socket.socket()
            other.bind(("127.0.0.2", 0))
            other.setblocking(False)
            await asyncio.get_running_loop().sock_connect(other, ("127.0.0.1", server.bound_port))
            assert await answer(other, b"hello", timeout=1.0) == b"ok"
            assert server.quotas.count("127.0.0.2") == 1 and server.quotas.count("127.0.0.1") == 9
            assert server.client_errors.get("evicted_connection") == 1
            for sock in crowd + [other]:
                sock.close()
        finally:
            await server.stop_accepting()
            await server.close_all()

    run(scenario())


def test_malformed_frames_warn_once_per_client_and_kind_and_are_counted(caplog):
    def handler(payload: memoryview, peer: str):
        raise CloseConnection("malformed request", "malformed_request")

    async def scenario():
        server = SocketServer("127.0.0.1", 0, handler, 1 << 20)
        await server.start()
        try:
            for _ in range(200):
                sock = await connect(server.bound_port)
                await asyncio.get_running_loop().sock_sendall(sock, frame(b"garbage"))
                sock.close()
            await wait_until_async(lambda: server.client_errors.get("malformed_request") == 200,
                                   message="every malformed frame counted")
            server.warnings.interval_s = 0.0
            server.warnings.flush()
        finally:
            await server.stop_accepting()
            await server.close_all()

    with caplog.at_level(logging.WARNING, logger="broker.server.socket_server"):
        run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("closing connection from 127.0.0.1:") and lines[0].endswith("malformed request")
    assert lines[1].startswith("199 more malformed_request warning(s) from 127.0.0.1")
