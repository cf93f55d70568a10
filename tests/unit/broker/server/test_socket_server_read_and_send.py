"""socket.sendfile.enable=false: file regions reach the client through os.pread + send, never os.sendfile."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest

import broker.server.socket_server as socket_server
from broker.config import KafkaConfig
from broker.server.socket_server import SocketServer


class Region:
    """A file region with its own fd, as the storage layer hands it out."""

    def __init__(self, path, position: int, size: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.position = position
        self.size = size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


async def fetch_region(use_sendfile: bool, data_file, position: int, size: int) -> bytes:
    def handler(payload: memoryview, peer: str):
        return [struct.pack(">i", size), Region(data_file, position, size)]

    server = SocketServer("127.0.0.1", 0, handler, 1 << 20, use_sendfile=use_sendfile)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        writer.write(struct.pack(">i", 1) + b"x")
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        body = await reader.readexactly(length)
        writer.close()
        await writer.wait_closed()
        return body
    finally:
        await server.stop_accepting()
        await server.close_all()


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "segment.log"
    path.write_bytes(os.urandom(3 * 1024 * 1024))
    return path


def test_read_and_send_path_sends_the_region_without_sendfile(data_file, monkeypatch):
    def no_sendfile(*args):
        raise AssertionError("os.sendfile used although socket.sendfile.enable is false")

    monkeypatch.setattr(socket_server.os, "sendfile", no_sendfile)
    expected = data_file.read_bytes()[12345: 12345 + 2_500_000]
    body = asyncio.run(asyncio.wait_for(fetch_region(False, data_file, 12345, 2_500_000), 30))
    assert body == expected


def test_sendfile_path_is_the_default_and_uses_sendfile(data_file, monkeypatch):
    calls = []
    real_sendfile = os.sendfile

    def counting_sendfile(*args):
        calls.append(args)
        return real_sendfile(*args)

    monkeypatch.setattr(socket_server.os, "sendfile", counting_sendfile)
    body = asyncio.run(asyncio.wait_for(fetch_region(True, data_file, 0, 100_000), 30))
    assert body == data_file.read_bytes()[:100_000]
    assert calls


def test_broker_property_switches_the_path():
    assert KafkaConfig()["socket.sendfile.enable"] is True
    assert KafkaConfig({"socket.sendfile.enable": "false"})["socket.sendfile.enable"] is False
