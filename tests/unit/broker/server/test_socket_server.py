"""SocketServer over real loopback sockets with a small echo handler (no Kafka protocol involved)."""

from __future__ import annotations

import asyncio
import os
import struct


from broker.server.socket_server import CloseConnection, SocketServer


class Region:
    """A file region as the storage layer hands it out: an fd of its own, closed after sending."""

    def __init__(self, path, position: int, size: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.position = position
        self.size = size
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
            self.closed = True


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (length,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(length)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def make_handler(tmp_path, regions: list):
    data_file = tmp_path / "data"
    data_file.write_bytes(bytes(range(256)) * 4096)

    def handler(payload: memoryview, peer: str):
        body = bytes(payload)
        if body == b"boom":
            raise CloseConnection("asked to close")
        if body == b"silent":
            return None
        if body.startswith(b"file:"):
            size = int(body[5:])
            region = Region(data_file, 7, size)
            regions.append(region)
            return [struct.pack(">i", 2 + size) + b"F:", region]
        if body.startswith(b"slow:"):
            async def later():
                await asyncio.sleep(0.05)
                return [frame(b"late " + body[5:])]
            return later()
        return [frame(b"echo " + body)]

    return handler, data_file


async def start(handler, max_request_bytes=1 << 20) -> SocketServer:
    server = SocketServer("127.0.0.1", 0, handler, max_request_bytes)
    await server.start()
    return server


def test_responses_in_request_order_with_pipelining(tmp_path):
    handler, _ = make_handler(tmp_path, [])

    async def scenario():
        server = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        requests = [b"a", b"slow:b", b"silent", b"c"] * 50
        writer.write(b"".join(frame(r) for r in requests))
        await writer.drain()
        got = [await read_frame(reader) for _ in range(150)]
        writer.close()
        await server.stop_accepting()
        await server.close_all()
        return got

    got = run(scenario())
    assert got == [b"echo a", b"late b", b"echo c"] * 50


def test_file_regions_are_sent_with_surrounding_bytes(tmp_path):
    regions: list[Region] = []
    handler, data_file = make_handler(tmp_path, regions)
    content = data_file.read_bytes()

    async def scenario():
        server = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        writer.write(frame(b"x") + frame(b"file:1000000") + frame(b"y") + frame(b"file:10"))
        await writer.drain()
        got = [await read_frame(reader) for _ in range(4)]
        writer.close()
        await server.stop_accepting()
        await server.close_all()
        return got

    got = run(scenario())
    assert got[0] == b"echo x"
    assert got[1] == b"F:" + content[7 : 7 + 1000000]
    assert got[2] == b"echo y"
    assert got[3] == b"F:" + content[7:17]
    assert all(r.closed for r in regions)


def test_oversized_and_negative_frames_close_only_that_connection(tmp_path):
    handler, _ = make_handler(tmp_path, [])

    async def scenario():
        server = await start(handler, max_request_bytes=1024)
        good_reader, good_writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        outcomes = []
        for bad in (struct.pack(">i", 2**31 - 1), struct.pack(">i", -5), frame(b"z" * 2000), frame(b"boom")):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
            writer.write(bad)
            await writer.drain()
            outcomes.append(await reader.read())  # b"" once the server closes the connection
            writer.close()
        good_writer.write(frame(b"still here"))
        await good_writer.drain()
        answer = await read_frame(good_reader)
        good_writer.close()
        await server.stop_accepting()
        await server.close_all()
        return outcomes, answer

    outcomes, answer = run(scenario())
    assert outcomes == [b"", b"", b"", b""]
    assert answer == b"echo still here"


def test_frame_split_across_many_reads_and_large_frames(tmp_path):
    handler, _ = make_handler(tmp_path, [])

    async def scenario():
        server = await start(handler, max_request_bytes=8 << 20)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        big = os.urandom(3 << 20)
        data = frame(b"tiny") + frame(big)
        for i in range(0, len(data), 65521):
            writer.write(data[i : i + 65521])
            await writer.drain()
        first = await read_frame(reader)
        second = await read_frame(reader)
        writer.close()
        await server.stop_accepting()
        await server.close_all()
        return first, second, big

    first, second, big = run(scenario())
    assert first == b"echo tiny"
    assert second == b"echo " + big


def test_port_zero_binds_a_free_port(tmp_path):
    handler, _ = make_handler(tmp_path, [])

    async def scenario():
        server = await start(handler)
        port = server.bound_port
        await server.stop_accepting()
        return port

    assert run(scenario()) > 0
