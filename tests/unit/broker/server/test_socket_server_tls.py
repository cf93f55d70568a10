"""SocketServer's TLS listeners over real loopback sockets: framing, file regions, client certificates, several
listeners at once, and handshakes that fail or never come."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import pytest

from broker.security.listeners import EndPoint
from broker.security.ssl_factory import SslSettings, server_context
from broker.server import tls_channel
from broker.server.socket_server import Listener, SocketServer
from infra.deployment.certificates import CertificateAuthority
from tests.unit.broker.server.test_socket_server import frame, make_handler, read_frame, run


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(root / "ca")
    other = CertificateAuthority(root / "other-ca")
    return {"ca": ca, "broker": ca.issue("broker", hosts=["localhost", "127.0.0.1"]),
            "alice": ca.issue("alice"), "stranger": other.issue("stranger")}


def tls_listener(pki, client_auth: str = "none", name: str = "SSL") -> Listener:
    settings = SslSettings(keystore=str(pki["broker"].bundle), truststore=str(pki["ca"].cert_path),
                           client_auth=client_auth)
    return Listener(EndPoint(name, "SSL", "127.0.0.1", 0), server_context(settings))


def client_context(pki, cert=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"].cert_path))
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    return context


async def exchange(port: int, payload: bytes, context: ssl.SSLContext | None) -> bytes:
    """One request and its answer on a new connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname="localhost" if context else None)
    try:
        writer.write(frame(payload))
        await writer.drain()
        return await read_frame(reader)
    finally:
        writer.close()


async def stop(server: SocketServer) -> None:
    await server.stop_accepting()
    await server.close_all()


async def start(handler, *listeners: Listener, **limits) -> SocketServer:
    server = SocketServer("127.0.0.1", 0, handler, 1 << 20, listeners=listeners, **limits)
    await server.start()
    return server


def test_frames_and_file_regions_over_tls(tmp_path, pki):
    regions: list = []
    handler, data_file = make_handler(tmp_path, regions)
    expected = data_file.read_bytes()[7:7 + 1_000_000]

    async def scenario():
        server = await start(handler, tls_listener(pki))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        writer.write(frame(b"a") + frame(b"slow:b") + frame(b"file:1000000") + frame(b"c"))
        await writer.drain()
        answers = [await read_frame(reader) for _ in range(4)]
        writer.close()
        await stop(server)
        return answers

    answers = run(scenario())
    assert answers[:2] == [b"echo a", b"late b"]
    assert answers[2] == b"F:" + expected
    assert answers[3] == b"echo c"
    assert all(region.closed for region in regions)


def test_client_certificate_names_the_principal(tmp_path, pki):
    seen = []

    def handler(payload, session):
        seen.append((session.listener_name, session.security_protocol, str(session.principal)))
        return [frame(b"ok")]

    async def scenario():
        server = await start(handler, tls_listener(pki, "required"))
        assert await exchange(server.bound_port, b"x", client_context(pki, pki["alice"])) == b"ok"
        await stop(server)

    run(scenario())
    assert seen == [("SSL", "SSL", "User:CN=alice")]


def test_required_client_auth_refuses_a_client_without_or_with_a_foreign_certificate(tmp_path, pki):
    handler, _ = make_handler(tmp_path, [])

    async def attempt(server, cert):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port,
                                                           ssl=client_context(pki, cert), server_hostname="localhost")
            # TLS 1.3: the client learns of the refusal at its first read.
            writer.write(frame(b"x"))
            await writer.drain()
            await read_frame(reader)
        except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError) as exc:
            return exc
        return None

    async def scenario():
        server = await start(handler, tls_listener(pki, "required"))
        results = [await attempt(server, None), await attempt(server, pki["stranger"])]
        # The server still serves others.
        assert await exchange(server.bound_port, b"still", client_context(pki, pki["alice"])) == b"echo still"
        errors = server.client_errors
        await stop(server)
        return results, errors

    results, errors = run(scenario())
    assert all(result is not None for result in results)
    assert errors.get("authentication_failed") == 2


def test_plaintext_and_tls_listeners_at_once(tmp_path, pki):
    seen = []

    def handler(payload, session):
        seen.append(session.listener_name)
        return [frame(b"ok")]

    async def scenario():
        server = await start(handler, Listener(EndPoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)), tls_listener(pki))
        assert server.bound_port == server.bound_ports["PLAINTEXT"] != server.bound_ports["SSL"]
        for port, context in ((server.bound_ports["PLAINTEXT"], None), (server.bound_ports["SSL"], client_context(pki))):
            assert await exchange(port, b"x", context) == b"ok"
        await stop(server)

    run(scenario())
    assert seen == ["PLAINTEXT", "SSL"]


def test_garbage_handshake_closes_only_its_connection(tmp_path, pki):
    handler, _ = make_handler(tmp_path, [])

    async def scenario():
        server = await start(handler, tls_listener(pki))
        good_reader, good_writer = await asyncio.open_connection("127.0.0.1", server.bound_port,
                                                                 ssl=client_context(pki), server_hostname="localhost")
        bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        bad_writer.write(frame(b"this is no TLS ClientHello") * 10)
        await bad_writer.drain()
        # The server answers with an alert (or nothing) and closes.
        await asyncio.wait_for(bad_reader.read(), 10)
        good_writer.write(frame(b"after"))
        await good_writer.drain()
        assert await read_frame(good_reader) == b"echo after"
        errors = server.client_errors
        bad_writer.close()
        good_writer.close()
        await stop(server)
        return errors

    assert run(scenario()).get("authentication_failed") == 1


def test_a_client_that_never_handshakes_is_closed(tmp_path, pki):
    handler, _ = make_handler(tmp_path, [])

    async def scenario():
        server = await start(handler, tls_listener(pki), request_read_timeout_ms=300)
        sock = socket.create_connection(("127.0.0.1", server.bound_port))
        sock.setblocking(False)
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        data = await asyncio.wait_for(loop.sock_recv(sock, 100), 10)
        elapsed = time.monotonic() - started
        sock.close()
        errors = server.client_errors
        await stop(server)
        return data, elapsed, errors, server.connection_count

    data, elapsed, errors, open_connections = run(scenario())
    assert data == b""
    assert elapsed < 5
    assert errors.get("ssl_handshake_timeout") == 1
    assert open_connections == 0


def test_listeners_bind_or_none_stays_open(pki):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]

    async def scenario():
        server = SocketServer("127.0.0.1", 0, lambda payload, session: None, 1 << 20, listeners=[
            Listener(EndPoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)),
            Listener(EndPoint("SSL", "SSL", "127.0.0.1", port), None)])
        with pytest.raises(OSError):
            await server.start()
        return server

    try:
        server = run(scenario())
        assert server._sockets == []
    finally:
        taken.close()


def test_file_region_of_several_write_chunks(tmp_path, pki, monkeypatch):
    monkeypatch.setattr(tls_channel, "WRITE_CHUNK", 64 * 1024)
    handler, data_file = make_handler(tmp_path, [])
    total = len(data_file.read_bytes()) - 7

    async def scenario():
        server = await start(handler, tls_listener(pki))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        writer.write(frame(f"file:{total}".encode()) + frame(b"big:" + b"x" * 300_000))
        await writer.drain()
        answers = [await read_frame(reader), await read_frame(reader)]
        writer.close()
        await stop(server)
        return answers

    region, echo = run(scenario())
    assert region == b"F:" + data_file.read_bytes()[7:]
    assert echo == b"echo big:" + b"x" * 300_000


def test_tls_1_2_only_listener(tmp_path, pki):
    handler, data_file = make_handler(tmp_path, [])
    settings = SslSettings(keystore=str(pki["broker"].bundle), enabled_protocols=("TLSv1.2",))
    listener = Listener(EndPoint("SSL", "SSL", "127.0.0.1", 0), server_context(settings))

    async def scenario():
        server = await start(handler, listener)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        version = writer.get_extra_info("ssl_object").version()
        writer.write(frame(b"file:300000") + frame(b"after"))
        await writer.drain()
        answers = [await read_frame(reader), await read_frame(reader)]
        writer.close()
        await stop(server)
        return version, answers

    version, answers = run(scenario())
    assert version == "TLSv1.2"
    assert answers == [b"F:" + data_file.read_bytes()[7:7 + 300000], b"echo after"]
